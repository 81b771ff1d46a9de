package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// fixture is a fixed placement: a 4-node job in one leaf, a 2-node job
// across leaves, a job with a pod without GPUs and one not yet placed, and
// a job held for admission.
func fixture() (Tree, []Job) {
	tree := Tree{Name: "fixture", Spines: []Spine{{Name: "spine-0", Leaves: []Leaf{
		{Name: "leaf-0", Nodes: []Node{{"h100-00", 8}, {"h100-01", 8}, {"h100-02", 8}, {"h100-03", 8}}},
		{Name: "leaf-1", Nodes: []Node{{"h100-04", 8}, {"h100-05", 8}}},
	}}}}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	jobs := []Job{
		{Name: "demo/llama-ddp", Framework: "PyTorch", Domain: "spine=spine-0/leaf=leaf-0", Level: "leaf", Efficiency: "1.00", Ranks: []Rank{
			{Pod: "llama-ddp-master-0", Node: "h100-00", GPUs: all},
			{Pod: "llama-ddp-worker-0", Node: "h100-01", GPUs: all},
			{Pod: "llama-ddp-worker-1", Node: "h100-02", GPUs: all},
			{Pod: "llama-ddp-worker-2", Node: "h100-03", GPUs: all},
		}},
		{Name: "demo/jax-t5", Framework: "JAX", Domain: "spine=spine-0", Level: "spine", Efficiency: "0.93", Ranks: []Rank{
			{Pod: "jax-t5-worker-0", Node: "h100-04", GPUs: []int{0, 1, 2, 3}},
			{Pod: "jax-t5-worker-1", Node: "h100-05", GPUs: []int{0, 1, 2, 3}},
		}},
		{Name: "demo/tf-<small>", Framework: "TensorFlow", Domain: "h100-04", Level: "host", Efficiency: "1.00", Ranks: []Rank{
			{Pod: "tf-chief-0", Node: "h100-04", GPUs: []int{4, 6}},
			{Pod: "tf-ps-0", Node: "h100-04"},
			{Pod: "tf-worker-0"},
		}},
		{Name: "demo/queued", Framework: "PyTorch", Held: "WaitingForAdmission: waiting for Kueue to admit the job in LocalQueue user-queue"},
	}
	return tree, jobs
}

func TestWriteTable(t *testing.T) {
	_, jobs := fixture()
	var buf bytes.Buffer
	if err := WriteTable(&buf, jobs); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("table differs from %s (go test -update to rewrite):\ngot:\n%s\nwant:\n%s", golden, got, want)
	}
}

func TestWriteSVG(t *testing.T) {
	tree, jobs := fixture()
	var buf bytes.Buffer
	if err := WriteSVG(&buf, tree, jobs); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML with an <svg> root.
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	var root string
	var text strings.Builder
	rects := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, buf.String())
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			if tok.Name.Local == "rect" {
				rects++
			}
		case xml.CharData:
			text.Write(tok)
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	// One cell per GPU at least.
	if rects < 6*8 {
		t.Errorf("%d rects, want at least one per GPU (48)", rects)
	}
	for _, j := range jobs {
		if !strings.Contains(text.String(), j.Name) {
			t.Errorf("no legend entry for %s", j.Name)
		}
	}
	for _, want := range []string{"spine-0", "leaf-0", "leaf-1", "h100-05", "efficiency 0.93"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("picture lacks %q", want)
		}
	}
}

func TestParseAndFormatGPUs(t *testing.T) {
	for in, want := range map[string]string{"": "-", "0,1,2,3,4,5,6,7": "0-7", "0,1,4,5": "0-1,4-5", "3": "3", "0,2,3,7": "0,2-3,7"} {
		gpus, err := ParseGPUs(in)
		if err != nil {
			t.Fatalf("ParseGPUs(%q): %v", in, err)
		}
		if got := formatGPUs(gpus); got != want {
			t.Errorf("formatGPUs(ParseGPUs(%q)) = %q, want %q", in, got, want)
		}
	}
	if _, err := ParseGPUs("0,x"); err == nil {
		t.Error("ParseGPUs accepted a bad index")
	}
}

// TestOwnExamples: deploy/examples decode strictly, validate and have
// distinct names.
func TestOwnExamples(t *testing.T) {
	jobs, err := loadOwnExamples(filepath.Join("..", "..", "deploy", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) < 4 {
		t.Errorf("%d example jobs, want at least 4", len(jobs))
	}
	if err := intoNamespace(demoNamespace, jobs); err != nil {
		t.Error(err)
	}
}

func TestNaturalCompare(t *testing.T) {
	if naturalCompare("leaf-2", "leaf-10") >= 0 || naturalCompare("leaf-10", "leaf-2") <= 0 || naturalCompare("a", "b") >= 0 {
		t.Error("naturalCompare does not order numeric suffixes")
	}
}
