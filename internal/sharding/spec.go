package sharding

import (
	"fmt"

	"github.com/gomlx/compute/distributed"
)

// Mesh returns the one-axis mesh of devices named axis (e.g. [BatchAxis]).
func Mesh(devices int, axis string) (*distributed.DeviceMesh, error) {
	if err := checkDevices(devices); err != nil {
		return nil, err
	}
	mesh, err := distributed.NewDeviceMesh([]int{devices}, []string{axis})
	if err != nil {
		return nil, fmt.Errorf("sharding: a mesh of %d devices: %w", devices, err)
	}
	return mesh, nil
}

// Spec returns the sharding spec of a tensor of the given rank on a one-axis mesh:
// split along axis over the mesh's devices, or whole on each for [Replicated].
func Spec(mesh *distributed.DeviceMesh, rank, axis int) (*distributed.ShardingSpec, error) {
	if mesh == nil || mesh.Rank() != 1 {
		return nil, fmt.Errorf("sharding: specs are made on a mesh of one axis, got %v", mesh)
	}
	if axis == Replicated {
		return distributed.NewReplicatedShardingSpec(mesh), nil
	}
	if axis < 0 || axis >= rank {
		return nil, fmt.Errorf("sharding: axis %d of a tensor of rank %d", axis, rank)
	}
	axes := make([]distributed.AxisSpec, rank)
	axes[axis] = distributed.AxisSpec{mesh.AxesNames()[0]}
	spec, err := distributed.NewShardingSpec(mesh, axes...)
	if err != nil {
		return nil, fmt.Errorf("sharding: axis %d of rank %d: %w", axis, rank, err)
	}
	return spec, nil
}
