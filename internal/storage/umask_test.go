package storage_test

import "syscall"

// umask sets the process's umask and returns the previous one.
func umask(m int) int { return syscall.Umask(m) }
