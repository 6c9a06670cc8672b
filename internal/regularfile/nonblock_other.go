//go:build !unix

package regularfile

// nonBlock is not needed where named pipes are not files of the file system.
const nonBlock = 0
