//go:build cgo && !noxla && linux

package hlo

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>

// computeCapabilityMajor returns the major compute capability of CUDA device ordinal,
// asking the driver library the CUDA plugin itself loads, or -1 where it cannot.
static int computeCapabilityMajor(int ordinal) {
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		return -1;
	}
	int (*init)(unsigned int) = (int (*)(unsigned int))dlsym(lib, "cuInit");
	int (*get)(int *, int) = (int (*)(int *, int))dlsym(lib, "cuDeviceGet");
	int (*attribute)(int *, int, int) = (int (*)(int *, int, int))dlsym(lib, "cuDeviceGetAttribute");
	int device, major = -1;
	const int computeCapabilityMajorAttribute = 75; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	if (init == NULL || get == NULL || attribute == NULL || init(0) != 0 || get(&device, ordinal) != 0 ||
		attribute(&major, computeCapabilityMajorAttribute, device) != 0) {
		major = -1;
	}
	dlclose(lib);
	return major;
}
*/
import "C"

// cudaComputeCapability returns the major compute capability of the CUDA device of
// ordinal, or -1 where the driver cannot say. go-xla's pjrt does not expose the
// device description's attributes, which hold it, so the driver is asked directly.
func cudaComputeCapability(ordinal int) int { return int(C.computeCapabilityMajor(C.int(ordinal))) }
