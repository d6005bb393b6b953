#!/bin/sh
# Writes the man page and the shell completion scripts that release
# archives carry (a goreleaser before-hook; see .goreleaser.yaml).
set -eu
out=${1:-extras}
version=${2:-dev}
rm -rf "$out"
mkdir -p "$out/completions"
go build -ldflags "-X main.version=$version" -o "$out/lanes" .
"$out/lanes" man > "$out/lanes.1"
for shell in bash zsh fish; do
  "$out/lanes" completion "$shell" > "$out/completions/lanes.$shell"
done
rm "$out/lanes"
