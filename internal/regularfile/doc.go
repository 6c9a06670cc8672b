// Package regularfile opens and reads files of a model folder, which is untrusted input,
// refusing anything but regular files before reading: opening a named pipe for reading
// blocks until a writer comes, and a device file can be read forever. Reads are bounded
// by a size limit given by the caller.
package regularfile
