//go:build cgo && !noxla

package hlo

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/go-xla/pjrt"
)

// Buffer is a tensor on the backend's device (or, for a build-only backend, in host
// memory). It implements [compute.Buffer].
type Buffer struct {
	backend *Backend
	shape   shapes.Shape
	device  *pjrt.Buffer // nil once finalized or donated, and for host buffers
	host    any          // a build-only backend's flat data
}

var _ compute.Buffer = (*Buffer)(nil)

// newHostBuffer copies flat into a host buffer of a build-only backend.
func newHostBuffer(b *Backend, flat any, shape shapes.Shape) *Buffer {
	if flat == nil { // a zero-size shape (see checkFlat)
		return &Buffer{backend: b, shape: shape, host: dtypes.MakeAnySlice(shape.DType, 0)}
	}
	v := reflect.ValueOf(flat)
	c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
	reflect.Copy(c, v)
	return &Buffer{backend: b, shape: shape, host: c.Interface()}
}

// checkFlat checks that flat is a slice of shape's Go type with shape's size; GoMLX
// passes nil for zero-size shapes.
func checkFlat(flat any, shape shapes.Shape) error {
	if flat == nil && shape.Size() == 0 {
		return nil
	}
	v := reflect.ValueOf(flat)
	if v.Kind() != reflect.Slice {
		return fmt.Errorf("flat data is a %T, not a slice", flat)
	}
	if want := shape.DType.GoType(); v.Type().Elem() != want {
		return fmt.Errorf("flat data is a %T, want []%s for %s", flat, want, shape)
	}
	if v.Len() != shape.Size() {
		return fmt.Errorf("flat data has %d values, %s has %d", v.Len(), shape, shape.Size())
	}
	return nil
}

// valid reports an error for a finalized or donated buffer.
func (b *Buffer) valid() error {
	if b == nil || (b.device == nil && b.host == nil) {
		return errors.New("hlo: the buffer was finalized or donated")
	}
	return nil
}

// Backend returns the backend that owns b.
func (b *Buffer) Backend() compute.Backend { return b.backend }

// Finalize frees b's device memory now.
func (b *Buffer) Finalize() error {
	if b.device == nil {
		b.host = nil
		return nil
	}
	// After the backend is finalized, its client has freed the buffer already.
	var err error
	if !b.backend.finalized {
		err = b.device.Destroy()
	}
	b.device = nil
	if err != nil {
		return fmt.Errorf("hlo: freeing a %s buffer: %w", b.shape, err)
	}
	return nil
}

// Shape returns b's shape.
func (b *Buffer) Shape() (shapes.Shape, error) {
	if err := b.valid(); err != nil {
		return shapes.Invalid(), err
	}
	return b.shape, nil
}

// DeviceNum returns 0, the only device used.
func (b *Buffer) DeviceNum() (compute.DeviceNum, error) {
	if err := b.valid(); err != nil {
		return 0, err
	}
	return 0, nil
}

// ToFlatData copies b's values into flat, a slice of b's Go type and size.
func (b *Buffer) ToFlatData(flat any) error {
	if err := b.valid(); err != nil {
		return err
	}
	if err := checkFlat(flat, b.shape); err != nil {
		return fmt.Errorf("hlo: ToFlatData: %w", err)
	}
	if b.host != nil {
		reflect.Copy(reflect.ValueOf(flat), reflect.ValueOf(b.host))
		return nil
	}
	if b.shape.Size() == 0 {
		return nil
	}
	if err := b.device.ToHost(dtypes.UnsafeByteSliceFromAny(flat)); err != nil {
		return fmt.Errorf("hlo: copying a %s buffer to the host: %w", b.shape, err)
	}
	return nil
}

// Data fails: the backend has no shared buffers.
func (b *Buffer) Data() (any, error) {
	return nil, fmt.Errorf("hlo: Buffer.Data (shared buffers): %w", compute.ErrNotImplemented)
}

// CopyToDevice fails: only device 0 is used.
func (b *Buffer) CopyToDevice(deviceNum compute.DeviceNum) (compute.Buffer, error) {
	return nil, fmt.Errorf("hlo: copying a buffer to device %d: only device 0 is supported", deviceNum)
}
