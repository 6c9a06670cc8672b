//go:build !unix

package modelcore

import "errors"

func mkfifo(string) error { return errors.New("named pipes are not files here") }
