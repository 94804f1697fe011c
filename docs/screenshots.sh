#!/usr/bin/env bash
# Regenerates the screenshots docs/teaching.md shows, with headless chromium:
#   docs/walk-blueflame.png       softnic trace --html (BlueFlame WRITE 64 B)
#   docs/compare-bf-doorbell.png  softnic view bf.json --compare db.json
#   docs/walk-frame.png           the RoCEv2 frame of the WRITE, layer by layer
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
command -v chromium >/dev/null || { echo "screenshots: chromium not on PATH (apt-get install chromium)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/softnic" ./cmd/softnic
"$tmp/softnic" trace --json >"$tmp/bf.json"
"$tmp/softnic" trace --no-bf --json >"$tmp/db.json"
"$tmp/softnic" view "$tmp/bf.json" -o "$tmp/bf.html"
"$tmp/softnic" view "$tmp/bf.json" --compare "$tmp/db.json" -o "$tmp/cmp.html"
shot() { # out.png height url
  chromium --headless --disable-gpu --no-sandbox --hide-scrollbars --window-size=1220,"$2" --screenshot="$1" "$3" 2>/dev/null
}
shot docs/walk-blueflame.png 1100 "file://$tmp/bf.html#select=wqe_build"
shot docs/compare-bf-doorbell.png 1500 "file://$tmp/cmp.html#select=wqe_fetch&w=1"
shot docs/walk-frame.png 1400 "file://$tmp/bf.html#select=packetize"
echo "wrote docs/walk-blueflame.png docs/compare-bf-doorbell.png docs/walk-frame.png"
