package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// MaxNVLinks is NVML_NVLINK_MAX_LINKS: the link indices a recording asks
// every GPU about (18 on Hopper and Blackwell; fewer links answer
// NVMLErrorInvalidArgument past their last).
const MaxNVLinks = 18

// Recording is what a machine's NVML answered to every call of Library and
// Device: each GPU's queries, every NVLink index up to MaxNVLinks and every
// pair of GPUs. Replayed through Library, it stands in for the machine in
// tests, so discovery is checked against a real driver's answers (its
// error codes included) on machines without one. Record makes one;
// testdata/nvml holds the committed ones.
type Recording struct {
	// Machine says what was recorded (hardware, driver), for people.
	Machine string `json:"machine,omitempty"`
	// Count is nvmlDeviceGetCount's answer.
	Count   Answer           `json:"count"`
	Devices []RecordedDevice `json:"devices"`
}

// RecordedDevice is one GPU's answers.
type RecordedDevice struct {
	// Handle is nvmlDeviceGetHandleByIndex's failure; the GPU answered no
	// call when set.
	Handle *Answer `json:"handle,omitempty"`
	// Calls maps a call to its answer: the Device method's name, then
	// "/<link>" for NVLink calls or "/<GPU index>" for calls about a pair.
	Calls map[string]Answer `json:"calls,omitempty"`
}

// Answer is one call's outcome: its value on success, else the NVML return
// code (or, for a failure that is no NVML code, its message).
type Answer struct {
	Value  json.RawMessage `json:"value,omitempty"`
	Return NVMLReturn      `json:"return,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// migMode is the value of a recorded MIGMode call.
type migMode struct {
	Current bool `json:"current"`
	Pending bool `json:"pending"`
}

// Record asks lib everything a Recording holds. It fails only when NVML
// does not start or count its GPUs; a GPU's failed calls are recorded.
func Record(lib Library, machine string) (rec *Recording, err error) {
	if err := lib.Init(); err != nil {
		return nil, fmt.Errorf("nvmlInit: %w", err)
	}
	defer func() { err = errors.Join(err, lib.Shutdown()) }()
	rec = &Recording{Machine: machine}
	count, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("nvmlDeviceGetCount: %w", err)
	}
	if rec.Count, err = answer(count, nil); err != nil {
		return nil, err
	}
	devices := make([]Device, count)
	rec.Devices = make([]RecordedDevice, count)
	for i := range devices {
		d, err := lib.DeviceByIndex(i)
		if err != nil {
			a, _ := answer(0, err)
			rec.Devices[i].Handle = &a
			continue
		}
		devices[i] = d
	}
	for i, d := range devices {
		if d == nil {
			continue
		}
		calls := map[string]Answer{}
		var errs []error
		put := func(key string, v any, err error) {
			a, aerr := answer(v, err)
			calls[key] = a
			errs = append(errs, aerr)
		}
		uuid, err := d.UUID()
		put("UUID", uuid, err)
		name, err := d.Name()
		put("Name", name, err)
		mem, err := d.MemoryTotalBytes()
		put("MemoryTotalBytes", mem, err)
		bus, err := d.PCIBusID()
		put("PCIBusID", bus, err)
		arch, err := d.Architecture()
		put("Architecture", arch, err)
		numa, err := d.MemoryAffinity()
		put("MemoryAffinity", numa, err)
		cur, pending, err := d.MIGMode()
		put("MIGMode", migMode{Current: cur, Pending: pending}, err)
		pcie, err := d.MaxPCIeLink()
		put("MaxPCIeLink", pcie, err)
		fabric, err := d.FabricInfo()
		put("FabricInfo", fabric, err)
		for l := range MaxNVLinks {
			active, err := d.NVLinkState(l)
			put(callKey("NVLinkState", l), active, err)
			version, err := d.NVLinkVersion(l)
			put(callKey("NVLinkVersion", l), version, err)
			remote, err := d.NVLinkRemotePCIBusID(l)
			put(callKey("NVLinkRemotePCIBusID", l), remote, err)
			kind, err := d.NVLinkRemoteDeviceType(l)
			put(callKey("NVLinkRemoteDeviceType", l), kind, err)
		}
		for j, other := range devices {
			if j == i || other == nil {
				continue
			}
			level, err := d.TopologyCommonAncestor(other)
			put(callKey("TopologyCommonAncestor", j), level, err)
			p2p, err := d.NVLinkP2PStatus(other)
			put(callKey("NVLinkP2PStatus", j), p2p, err)
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		rec.Devices[i].Calls = calls
	}
	return rec, nil
}

// answer records a call's outcome. Its error is about encoding v, not the
// call's.
func answer(v any, callErr error) (Answer, error) {
	if callErr != nil {
		var code NVMLReturn
		if errors.As(callErr, &code) {
			return Answer{Return: code}, nil
		}
		return Answer{Error: callErr.Error()}, nil
	}
	b, err := json.Marshal(v)
	return Answer{Value: b}, err
}

// Sanitize returns a copy with what identifies the machine replaced by the
// placeholders Report.Sanitize uses: GPU UUIDs by index and a non-zero
// NVLink cluster UUID. Bus IDs, products and link facts are the hardware
// and stay.
func (r *Recording) Sanitize() (*Recording, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out := &Recording{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, err
	}
	for i := range out.Devices {
		calls := out.Devices[i].Calls
		if a, ok := calls["UUID"]; ok && a.Value != nil {
			a.Value, _ = json.Marshal(fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", i))
			calls["UUID"] = a
		}
		if a, ok := calls["FabricInfo"]; ok && a.Value != nil {
			var f FabricInfo
			if err := json.Unmarshal(a.Value, &f); err != nil {
				return nil, fmt.Errorf("GPU %d: FabricInfo: %w", i, err)
			}
			if f.ClusterUUID != ([16]byte{}) {
				f.ClusterUUID = [16]byte{15: 1}
			}
			a.Value, _ = json.Marshal(f)
			calls["FabricInfo"] = a
		}
	}
	return out, nil
}

// Library replays the recording: each call answers what the machine
// answered. A call the recording lacks fails with ErrNotRecorded, so a
// discovery that starts asking something new says so instead of passing.
func (r *Recording) Library() Library { return replayLibrary{r} }

// ErrNotRecorded is a replayed call the recording has no answer for.
var ErrNotRecorded = errors.New("not in the NVML recording")

type replayLibrary struct{ rec *Recording }

func (l replayLibrary) Init() error     { return nil }
func (l replayLibrary) Shutdown() error { return nil }

func (l replayLibrary) DeviceCount() (int, error) {
	return replayValue[int](l.rec.Count, "DeviceCount")
}

func (l replayLibrary) DeviceByIndex(i int) (Device, error) {
	if i < 0 || i >= len(l.rec.Devices) {
		return nil, NVMLErrorInvalidArgument
	}
	if h := l.rec.Devices[i].Handle; h != nil {
		_, err := replayValue[struct{}](*h, "DeviceByIndex")
		return nil, err
	}
	return replayDevice{index: i, calls: l.rec.Devices[i].Calls}, nil
}

type replayDevice struct {
	index int
	calls map[string]Answer
}

// call answers the call recorded under key.
func call[T any](d replayDevice, key string) (T, error) {
	a, ok := d.calls[key]
	if !ok {
		var zero T
		return zero, fmt.Errorf("GPU %d: %s: %w", d.index, key, ErrNotRecorded)
	}
	return replayValue[T](a, key)
}

// replayValue turns an answer back into the call's result.
func replayValue[T any](a Answer, key string) (T, error) {
	var v T
	switch {
	case a.Error != "":
		return v, errors.New(a.Error)
	case a.Return != NVMLSuccess:
		return v, a.Return
	}
	if err := json.Unmarshal(a.Value, &v); err != nil {
		return v, fmt.Errorf("%s: recorded value %s: %w", key, a.Value, err)
	}
	return v, nil
}

// callKey is the key of an NVLink call ("NVLinkState/3", n the link) or
// of a call about a pair of GPUs ("NVLinkP2PStatus/5", n the other GPU's
// index), for recording and replay alike.
func callKey(name string, n int) string { return name + "/" + strconv.Itoa(n) }

// pair is the key of a call about d and other; a device that is not from
// the replay has none, and the call fails as not recorded.
func pair(name string, other Device) string {
	if o, ok := other.(replayDevice); ok {
		return callKey(name, o.index)
	}
	return name + "/?"
}

func (d replayDevice) UUID() (string, error)             { return call[string](d, "UUID") }
func (d replayDevice) Name() (string, error)             { return call[string](d, "Name") }
func (d replayDevice) MemoryTotalBytes() (uint64, error) { return call[uint64](d, "MemoryTotalBytes") }
func (d replayDevice) PCIBusID() (string, error)         { return call[string](d, "PCIBusID") }
func (d replayDevice) Architecture() (Architecture, error) {
	return call[Architecture](d, "Architecture")
}
func (d replayDevice) MemoryAffinity() ([]int, error)  { return call[[]int](d, "MemoryAffinity") }
func (d replayDevice) MaxPCIeLink() (PCIeLink, error)  { return call[PCIeLink](d, "MaxPCIeLink") }
func (d replayDevice) FabricInfo() (FabricInfo, error) { return call[FabricInfo](d, "FabricInfo") }

func (d replayDevice) MIGMode() (bool, bool, error) {
	m, err := call[migMode](d, "MIGMode")
	return m.Current, m.Pending, err
}

func (d replayDevice) NVLinkState(l int) (bool, error) {
	return call[bool](d, callKey("NVLinkState", l))
}
func (d replayDevice) NVLinkVersion(l int) (NVLinkVersion, error) {
	return call[NVLinkVersion](d, callKey("NVLinkVersion", l))
}
func (d replayDevice) NVLinkRemotePCIBusID(l int) (string, error) {
	return call[string](d, callKey("NVLinkRemotePCIBusID", l))
}
func (d replayDevice) NVLinkRemoteDeviceType(l int) (NVLinkDeviceType, error) {
	return call[NVLinkDeviceType](d, callKey("NVLinkRemoteDeviceType", l))
}
func (d replayDevice) TopologyCommonAncestor(other Device) (TopologyLevel, error) {
	return call[TopologyLevel](d, pair("TopologyCommonAncestor", other))
}
func (d replayDevice) NVLinkP2PStatus(other Device) (P2PStatus, error) {
	return call[P2PStatus](d, pair("NVLinkP2PStatus", other))
}
