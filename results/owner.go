package results

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// DirMode and FileMode are the modes of what meshchaos writes for its user to read: run
// directories, reports, comparisons, suite output and history. They are set explicitly, not
// left to the umask: a report that only its writer (often root) can read would be no report.
const (
	DirMode  fs.FileMode = 0o755
	FileMode fs.FileMode = 0o644
)

// MkdirAll creates dir and its missing parents with DirMode, whatever the umask, and returns
// the directories it created, outermost first.
func MkdirAll(dir string) error {
	_, err := mkdirAll(dir)
	return err
}

// mkdirAll is MkdirAll returning the directories it created, outermost first.
func mkdirAll(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	// The missing ones: dir and its parents up to the first that exists.
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil {
			if !fi.IsDir() {
				// As os.MkdirAll: a file in the way is an error, not a directory.
				return nil, &fs.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	slices.Reverse(missing)
	var made []string
	for _, d := range missing {
		if err := os.Mkdir(d, DirMode); err != nil {
			if errors.Is(err, fs.ErrExist) {
				// Made meanwhile by someone else: theirs, not ours.
				continue
			}
			return made, err
		}
		made = append(made, d)
		// The umask narrowed the mode os.Mkdir was given.
		if err := os.Chmod(d, DirMode); err != nil {
			return made, err
		}
	}
	return made, nil
}

// Created records what one command invocation created on disk: directories as it makes them
// and files it notes. A command refused after it made its directories removes them again while
// they are still empty (RemoveEmpty): a refusal leaves nothing. One that ran hands them to the
// user who ran it through sudo (Paths, GiveToInvoker). The zero value is ready; a nil *Created
// creates without recording.
type Created struct {
	mu    sync.Mutex
	paths []string // in the order they were created
}

// MkdirAll is MkdirAll recording every directory it creates.
func (c *Created) MkdirAll(dir string) error {
	made, err := mkdirAll(dir)
	c.note(made...)
	return err
}

// Mkdir creates dir (its parent must exist) with DirMode, whatever the umask, and records it.
// An existing dir is an error wrapping fs.ErrExist: creating it is how a caller claims it.
func (c *Created) Mkdir(dir string) error {
	if err := os.Mkdir(dir, DirMode); err != nil {
		return err
	}
	c.note(dir)
	return os.Chmod(dir, DirMode)
}

// Note records a file or directory the caller created itself.
func (c *Created) Note(path string) { c.note(path) }

func (c *Created) note(paths ...string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range paths {
		c.paths = append(c.paths, filepath.Clean(p))
	}
}

// Paths returns what was recorded, in the order it was created.
func (c *Created) Paths() []string {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.paths)
}

// RemoveEmpty removes the recorded directories that are empty, the last created first (a
// parent after its children), and forgets them. A directory that holds anything — a file
// written since, or a directory this invocation did not create — stays, and so does every
// parent of it: only what this invocation made and left empty goes.
func (c *Created) RemoveEmpty() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var kept []string
	for i := len(c.paths) - 1; i >= 0; i-- {
		p := c.paths[i]
		fi, err := os.Lstat(p)
		if err != nil {
			continue // gone already
		}
		// os.Remove removes an empty directory only; a noted file is the caller's to remove.
		if !fi.IsDir() || os.Remove(p) != nil {
			kept = append(kept, p)
		}
	}
	slices.Reverse(kept)
	c.paths = kept
}

// invoker returns the user the files meshchaos writes belong to when that is not the process's
// own user: the one who ran it through sudo. A variable so that tests need no second user.
var invoker = func() (uid, gid int, ok bool, err error) {
	return sudoInvoker(os.Geteuid(), os.Getenv)
}

// lchown changes a path's owner (a symbolic link's own, never its target's); a variable so
// that tests see every path the walk visits.
var lchown = os.Lchown

// sudoInvoker is the user who ran meshchaos through sudo: SUDO_UID and SUDO_GID, when the
// process runs as root (euid 0). Without them, or as another user, there is none (ok false):
// files stay the process's own.
func sudoInvoker(euid int, getenv func(string) string) (uid, gid int, ok bool, err error) {
	su, sg := getenv("SUDO_UID"), getenv("SUDO_GID")
	if euid != 0 || su == "" || sg == "" {
		return 0, 0, false, nil
	}
	if uid, err = strconv.Atoi(su); err != nil || uid < 0 {
		return 0, 0, false, fmt.Errorf("SUDO_UID=%q is not a user id", su)
	}
	if gid, err = strconv.Atoi(sg); err != nil || gid < 0 {
		return 0, 0, false, fmt.Errorf("SUDO_GID=%q is not a group id", sg)
	}
	return uid, gid, true, nil
}

// GiveToInvoker makes each path, and everything under it, owned by the user who ran meshchaos
// through sudo (SUDO_UID:SUDO_GID), so that they can move, re-render and delete their results
// without root. Without sudo it does nothing. Paths that do not exist are skipped (a run may
// not have got as far as writing them); symbolic links are not followed. Every path is tried;
// the error names the first that failed.
func GiveToInvoker(paths ...string) error {
	uid, gid, ok, err := invoker()
	if err != nil {
		return fmt.Errorf("give the results to the user who ran sudo: %w", err)
	}
	if !ok {
		return nil
	}
	var first error
	failed := 0
	for _, root := range outermost(paths) {
		err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if err := lchown(p, uid, gid); err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
			return nil
		})
		if err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("give the results to uid %d gid %d (who ran sudo): %d paths failed, the first: %w", uid, gid, max(failed, 1), first)
	}
	return nil
}

// outermost drops the empty paths, duplicates and those under another of paths: walking the
// outer one covers them.
func outermost(paths []string) []string {
	var clean []string
	for _, p := range paths {
		if p != "" {
			clean = append(clean, filepath.Clean(p))
		}
	}
	slices.Sort(clean)
	clean = slices.Compact(clean)
	var out []string
	for _, p := range clean {
		inside := false
		for _, o := range out {
			if o == "." && !filepath.IsAbs(p) || strings.HasPrefix(p, o+string(filepath.Separator)) || o == string(filepath.Separator) {
				inside = true
				break
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	return out
}
