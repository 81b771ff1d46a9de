// Command imagecheck verifies what the container images would ship, without
// a container engine: the binaries hack/build-image.sh wrote to --dir (the
// script the Dockerfile runs), and the Dockerfile's runtime stages.
//
//	go run ./hack/imagecheck --dir _output/image --dockerfile Dockerfile
//
// Each binary must be present, built with -trimpath and with the intended
// cgo setting; static ones must have no interpreter and no DT_NEEDED; the
// agent must need libc but not libnvidia-ml (go-nvml dlopens it at run
// time). Every runtime stage of the Dockerfile must run hack/build-image.sh's
// output as a numeric, non-root USER.
package main

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// binary is what one image's binary must look like.
type binary struct {
	name string
	// static binaries have no interpreter and need no shared library.
	static bool
	// needs are shared libraries that must be linked; forbidden are name
	// prefixes that must not be.
	needs     []string
	forbidden []string
}

// binaries are the images' binaries, as hack/build-image.sh builds them.
var binaries = []binary{
	{name: "lockstep-scheduler", static: true},
	{name: "lockstep-controller", static: true},
	{name: "lockstep-topology-agent", needs: []string{"libc.so.6"}, forbidden: []string{"libnvidia-ml"}},
}

func main() {
	dir := flag.String("dir", "", "directory hack/build-image.sh wrote the binaries to")
	dockerfile := flag.String("dockerfile", "Dockerfile", "the Dockerfile whose runtime stages are checked")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: imagecheck --dir DIR [--dockerfile FILE]")
		os.Exit(2)
	}
	var errs []error
	for _, b := range binaries {
		if err := checkBinary(filepath.Join(*dir, b.name), b); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Printf("imagecheck: %s ok (static=%t)\n", b.name, b.static)
		}
	}
	f, err := os.Open(*dockerfile)
	if err != nil {
		errs = append(errs, err)
	} else {
		defer f.Close()
		if err := checkDockerfile(f, binaries); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", *dockerfile, err))
		} else {
			fmt.Printf("imagecheck: %s ok (runtime stages run as a numeric non-root user)\n", *dockerfile)
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "imagecheck: FAIL\n%v\n", err)
		os.Exit(1)
	}
}

// checkBinary checks one binary's ELF headers and Go build settings.
func checkBinary(path string, want binary) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: reading Go build info: %w", path, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	var errs []error
	if settings["-trimpath"] != "true" {
		errs = append(errs, errors.New("not built with -trimpath"))
	}
	wantCgo := "1"
	if want.static {
		wantCgo = "0"
	}
	if got := settings["CGO_ENABLED"]; got != wantCgo {
		errs = append(errs, fmt.Errorf("built with CGO_ENABLED=%q, want %s", got, wantCgo))
	}

	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	interp := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			interp = true
		}
	}
	// ImportedLibraries reads DT_NEEDED; a binary with no dynamic section
	// has none.
	needed, err := f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("%s: reading DT_NEEDED: %w", path, err)
	}
	if want.static {
		if interp || len(needed) > 0 {
			errs = append(errs, fmt.Errorf("not static: interpreter %t, DT_NEEDED %v", interp, needed))
		}
	}
	for _, lib := range want.needs {
		if !contains(needed, func(n string) bool { return n == lib }) {
			errs = append(errs, fmt.Errorf("DT_NEEDED %v lacks %s", needed, lib))
		}
	}
	for _, prefix := range want.forbidden {
		if contains(needed, func(n string) bool { return strings.HasPrefix(n, prefix) }) {
			errs = append(errs, fmt.Errorf("DT_NEEDED %v links %s*, which must be loaded at run time", needed, prefix))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func contains(list []string, match func(string) bool) bool {
	for _, s := range list {
		if match(s) {
			return true
		}
	}
	return false
}

// stage is one FROM section of a Dockerfile.
type stage struct {
	name   string
	user   string // the last USER instruction's argument
	copies []string
	// builder stages are the source of another stage's COPY --from or FROM.
	builder bool
}

// checkDockerfile checks that the build stage runs hack/build-image.sh and
// that every runtime stage (one no other stage copies from) copies one of
// the binaries and sets a numeric, non-zero USER.
func checkDockerfile(r io.Reader, bins []binary) error {
	stages, runsScript, err := parseDockerfile(r)
	if err != nil {
		return err
	}
	var errs []error
	if !runsScript {
		errs = append(errs, errors.New("no RUN hack/build-image.sh: the image would not be built the way image-check builds"))
	}
	shipped := map[string]bool{}
	runtimeStages := 0
	for _, s := range stages {
		if s.builder {
			continue
		}
		runtimeStages++
		for _, c := range s.copies {
			shipped[filepath.Base(c)] = true
		}
		uid, _, _ := strings.Cut(s.user, ":")
		n, err := strconv.Atoi(uid)
		switch {
		case s.user == "":
			errs = append(errs, fmt.Errorf("stage %q sets no USER", s.name))
		case err != nil:
			errs = append(errs, fmt.Errorf("stage %q: USER %q is not numeric (Pod Security's runAsNonRoot can only verify a numeric user)", s.name, s.user))
		case n == 0:
			errs = append(errs, fmt.Errorf("stage %q runs as root", s.name))
		}
	}
	if runtimeStages == 0 {
		errs = append(errs, errors.New("no runtime stage"))
	}
	for _, b := range bins {
		if !shipped[b.name] {
			errs = append(errs, fmt.Errorf("no runtime stage copies %s", b.name))
		}
	}
	return errors.Join(errs...)
}

// parseDockerfile reads the stages. It understands what our Dockerfile
// uses: FROM ... AS name, USER, COPY --from=stage src dst, RUN, comments and
// backslash continuations.
func parseDockerfile(r io.Reader) (stages []*stage, runsScript bool, err error) {
	byName := map[string]*stage{}
	var cur *stage
	sc := bufio.NewScanner(r)
	var line string
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(text, "\\"); ok {
			line += rest + " "
			continue
		}
		line += text
		fields := strings.Fields(line)
		line = ""
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			s := &stage{name: strconv.Itoa(len(stages))}
			if len(fields) >= 4 && strings.EqualFold(fields[2], "AS") {
				s.name = fields[3]
			}
			if len(fields) >= 2 {
				if base, ok := byName[fields[1]]; ok {
					base.builder = true
				}
			}
			byName[s.name] = s
			stages = append(stages, s)
			cur = s
		case "USER":
			if cur == nil || len(fields) < 2 {
				return nil, false, fmt.Errorf("USER outside a stage or without a user: %q", strings.Join(fields, " "))
			}
			cur.user = fields[1]
		case "COPY":
			if cur == nil {
				return nil, false, errors.New("COPY before FROM")
			}
			args := fields[1:]
			from := ""
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				if v, ok := strings.CutPrefix(args[0], "--from="); ok {
					from = v
				}
				args = args[1:]
			}
			if from == "" {
				continue
			}
			if src, ok := byName[from]; ok {
				src.builder = true
			}
			if len(args) >= 2 {
				cur.copies = append(cur.copies, args[:len(args)-1]...)
			}
		case "RUN":
			if strings.Contains(strings.Join(fields[1:], " "), "hack/build-image.sh") {
				runsScript = true
			}
		}
	}
	return stages, runsScript, sc.Err()
}
