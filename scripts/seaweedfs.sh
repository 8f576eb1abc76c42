#!/usr/bin/env bash
# seaweedfs.sh: the SeaweedFS `weed` binary, an S3-compatible object store,
# built from its Go module source (the only way this machine reaches it:
# through the Go module proxy) and kept in a cache directory reused across
# runs, as the Kafka jars are. `go install` refuses the module's replace
# directives, so the module is downloaded and built in place.
#
#   scripts/seaweedfs.sh install   build weed into the cache (no-op when cached); prints its path
#   scripts/seaweedfs.sh path      print the cached binary's path (exit 1 when not built)
#
# Environment (all optional):
#   INBOXD_SEAWEEDFS_VERSION  module version (a pseudo-version the proxy serves)
#   INBOXD_SEAWEEDFS_CACHE    cache (default ~/.cache/inboxd/seaweedfs-<version>)
set -euo pipefail

VERSION="${INBOXD_SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"
CACHE="${INBOXD_SEAWEEDFS_CACHE:-${HOME:-/root}/.cache/inboxd/seaweedfs-${VERSION}}"
BIN="$CACHE/weed"

log() { echo "seaweedfs: $*" >&2; }

install() {
	if [[ -x "$BIN" ]]; then
		echo "$BIN"
		return
	fi
	command -v go >/dev/null || { log "go not found on PATH"; exit 1; }
	mkdir -p "$CACHE"
	# One build at a time: test binaries that need the store at once (and
	# CI's early background build) wait for the first.
	exec 9>"$CACHE/.lock"
	flock 9
	if [[ -x "$BIN" ]]; then
		echo "$BIN"
		return
	fi
	local start=$SECONDS dir
	log "downloading github.com/seaweedfs/seaweedfs@$VERSION"
	dir="$(GOFLAGS=-mod=mod go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
	[[ -d "$dir" ]] || { log "module download gave no directory"; exit 1; }
	log "building weed in $dir (about 15 minutes on 2 cores the first time)"
	(cd "$dir" && GOFLAGS=-mod=mod go build -o "$BIN.tmp" ./weed)
	mv "$BIN.tmp" "$BIN"
	log "built $BIN in $((SECONDS - start)) s"
	echo "$BIN"
}

case "${1:-install}" in
install) install ;;
path)
	[[ -x "$BIN" ]] || { log "not built: run scripts/seaweedfs.sh install"; exit 1; }
	echo "$BIN"
	;;
*)
	log "usage: $0 install|path"
	exit 2
	;;
esac
