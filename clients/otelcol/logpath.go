package plegdprocessor

import "strings"

// logFile is a log file path read the way plegd's GetContainer reads it (see
// src/lookup/keys.rs): the kubelet's <pods log dir>/<namespace>_<pod>_<uid>/<container>/<attempt>.log,
// a rotated file of it (.log.1, .log.<timestamp>, .log.<timestamp>.gz), or the
// /var/log/containers/<pod>_<namespace>_<container>-<id>.log link to it.
type logFile struct {
	// attempt form: the path without its rotation suffix (the file the runtime names
	// as the container's log path), and the pod uid its directory names.
	key string
	uid string
	// link form: the names and the container id the link's name carries.
	linkID, linkPod, linkNamespace, linkContainer string
}

// parseLogFile reads path; ok is false for anything plegd would refuse (it is then
// left to plegd to say so).
func parseLogFile(path string) (lf logFile, ok bool) {
	if !strings.HasPrefix(path, "/") {
		return lf, false
	}
	var parts []string
	for _, p := range strings.Split(path, "/") {
		switch p {
		case "":
		case ".", "..":
			return lf, false
		default:
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return lf, false
	}
	file, dirs := parts[len(parts)-1], parts[:len(parts)-1]
	if len(dirs) > 0 && dirs[len(dirs)-1] == "containers" {
		if stem, found := strings.CutSuffix(file, ".log"); found {
			if i := strings.LastIndexByte(stem, '-'); i >= 0 && isHex64(stem[i+1:]) {
				f := strings.SplitN(stem[:i], "_", 3)
				if len(f) == 3 && f[0] != "" && f[1] != "" && f[2] != "" {
					return logFile{linkID: stem[i+1:], linkPod: f[0], linkNamespace: f[1], linkContainer: f[2]}, true
				}
			}
		}
	}
	digits := 0
	for digits < len(file) && file[digits] >= '0' && file[digits] <= '9' {
		digits++
	}
	rest := file[digits:]
	if digits == 0 || (rest != ".log" && !strings.HasPrefix(rest, ".log.")) || len(dirs) < 2 {
		return lf, false
	}
	var podParts []string
	for _, p := range strings.Split(dirs[len(dirs)-2], "_") {
		if p != "" {
			podParts = append(podParts, p)
		}
	}
	if len(podParts) < 3 {
		return lf, false
	}
	var b strings.Builder
	b.Grow(len(path))
	for _, d := range dirs {
		b.WriteByte('/')
		b.WriteString(d)
	}
	b.WriteByte('/')
	b.WriteString(file[:digits+len(".log")])
	// Namespaces and pod names cannot hold '_': the uid is the last part.
	return logFile{key: b.String(), uid: podParts[len(podParts)-1]}, true
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// sameLogFile says whether the log path the runtime reports for a container is the
// file key names (its attempt form).
func sameLogFile(containerLogPath, key string) bool {
	if containerLogPath == key {
		return true
	}
	if !strings.Contains(containerLogPath, "//") {
		return false // the runtime's path is not rotated: only doubled slashes can differ
	}
	lf, ok := parseLogFile(containerLogPath)
	return ok && lf.key == key
}
