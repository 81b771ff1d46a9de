package discovery

import (
	"errors"
	"fmt"
)

// NVMLReturn is an NVML return code (nvmlReturn_t) used as an error. The
// values are NVML's, so an adapter converts a failed call's code directly,
// and callers match outcomes with errors.Is(err, NVMLErrorGPUIsLost).
type NVMLReturn int32

// NVML return codes discovery tells apart; any other code is still carried
// and printed by number.
const (
	NVMLSuccess                   NVMLReturn = 0
	NVMLErrorUninitialized        NVMLReturn = 1
	NVMLErrorInvalidArgument      NVMLReturn = 2
	NVMLErrorNotSupported         NVMLReturn = 3
	NVMLErrorNoPermission         NVMLReturn = 4
	NVMLErrorNotFound             NVMLReturn = 6
	NVMLErrorDriverNotLoaded      NVMLReturn = 9
	NVMLErrorLibraryNotFound      NVMLReturn = 12
	NVMLErrorFunctionNotFound     NVMLReturn = 13
	NVMLErrorGPUIsLost            NVMLReturn = 15
	NVMLErrorResetRequired        NVMLReturn = 16
	NVMLErrorLibRMVersionMismatch NVMLReturn = 18
	NVMLErrorUnknown              NVMLReturn = 999
)

func (r NVMLReturn) Error() string {
	switch r {
	case NVMLSuccess:
		return "NVML_SUCCESS"
	case NVMLErrorUninitialized:
		return "NVML_ERROR_UNINITIALIZED"
	case NVMLErrorInvalidArgument:
		return "NVML_ERROR_INVALID_ARGUMENT"
	case NVMLErrorNotSupported:
		return "NVML_ERROR_NOT_SUPPORTED"
	case NVMLErrorNoPermission:
		return "NVML_ERROR_NO_PERMISSION"
	case NVMLErrorNotFound:
		return "NVML_ERROR_NOT_FOUND"
	case NVMLErrorDriverNotLoaded:
		return "NVML_ERROR_DRIVER_NOT_LOADED"
	case NVMLErrorLibraryNotFound:
		return "NVML_ERROR_LIBRARY_NOT_FOUND"
	case NVMLErrorFunctionNotFound:
		return "NVML_ERROR_FUNCTION_NOT_FOUND"
	case NVMLErrorGPUIsLost:
		return "NVML_ERROR_GPU_IS_LOST"
	case NVMLErrorResetRequired:
		return "NVML_ERROR_RESET_REQUIRED"
	case NVMLErrorLibRMVersionMismatch:
		return "NVML_ERROR_LIB_RM_VERSION_MISMATCH"
	case NVMLErrorUnknown:
		return "NVML_ERROR_UNKNOWN"
	default:
		return fmt.Sprintf("NVML error %d", int32(r))
	}
}

// ErrNVMLNotFound is returned by Discover when libnvidia-ml.so.1 cannot be
// loaded. Its message says what to do about it.
var ErrNVMLNotFound = errors.New("NVML (libnvidia-ml.so.1) not found: run on a node with the NVIDIA driver, " +
	"mount the driver into the container (nvidia runtime class), or use --mode=fake")

// ErrNoGPUs is returned by Discover when NVML initializes but lists no GPU.
var ErrNoGPUs = errors.New("NVML lists no GPUs")

// QueryError is a failed NVML call about one GPU.
type QueryError struct {
	// GPU is the NVML index of the GPU queried.
	GPU int
	// Call is the NVML function, e.g. "nvmlDeviceGetUUID".
	Call string
	// Err is the failure, usually an NVMLReturn.
	Err error
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("GPU %d: %s: %v", e.GPU, e.Call, e.Err)
}

func (e *QueryError) Unwrap() error { return e.Err }

// isNotSupported reports whether err means the GPU, driver or platform does
// not offer the feature, as opposed to a failure worth reporting.
func isNotSupported(err error) bool {
	return errors.Is(err, NVMLErrorNotSupported) || errors.Is(err, NVMLErrorFunctionNotFound)
}
