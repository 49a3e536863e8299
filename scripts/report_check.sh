#!/usr/bin/env bash
# report_check.sh [REPORT_DIR] [SCREENSHOT.png] - check the page `make report` wrote the way a reader gets it:
# Debian's headless chromium renders REPORT_DIR/index.html (default results/report) with JavaScript off, and the
# check asserts that every scenario of `oomlab list` has its section in the rendered DOM, and that every <img>
# the page names exists and decodes as a PNG (signature, every chunk's CRC, IDAT inflates to the image's size).
# Then a screenshot (default docs/img/report.png, 1280 px wide). Exit 0 when all holds, 1 with each failure
# named, 2 when chromium is not installed (`make report-check` installs it).
set -u
dir=${1:-results/report}
shot=${2:-docs/img/report.png}
bin=${OOMLAB_BIN:-build/oomlab}
chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
  echo "report_check: chromium is not installed: skipped (make report-check installs it: apt-get install chromium)"
  exit 2
fi
[ -f "$dir/index.html" ] || { echo "report_check: $dir/index.html does not exist (make report writes it)"; exit 1; }
page="file://$(cd "$dir" && pwd)/index.html"
flags=(--headless --no-sandbox --disable-gpu --disable-javascript --hide-scrollbars)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s.%N)
timeout 120 "$chrome" "${flags[@]}" --dump-dom "$page" > "$tmp/dom.html" 2> "$tmp/chrome.err" ||
  { echo "report_check: chromium could not render $page:"; tail -3 "$tmp/chrome.err"; exit 1; }
t1=$(date +%s.%N)
bad=0
for s in $("$bin" list | awk 'NR > 0 && $1 ~ /^[a-z_]+$/ {print $1}'); do
  grep -q "<section id=\"$s\">" "$tmp/dom.html" || { echo "report_check: no section for $s in the rendered page"; bad=1; }
done
imgs=$(grep -o '<img src="[^"]*"' "$tmp/dom.html" | sed 's/<img src="//; s/"$//')
n=0
for i in $imgs; do
  n=$((n + 1))
  python3 - "$dir/$i" <<'PY' || bad=1
import struct, sys, zlib
p = sys.argv[1]
try:
    b = open(p, "rb").read()
except OSError as e:
    sys.exit(f"report_check: {p}: {e.strerror}")
if b[:8] != b"\x89PNG\r\n\x1a\n":
    sys.exit(f"report_check: {p} is not a PNG")
i, idat, w = 8, b"", None
while i < len(b):
    n, t = struct.unpack(">I4s", b[i:i + 8]); d = b[i + 8:i + 8 + n]
    if zlib.crc32(t + d) != struct.unpack(">I", b[i + 8 + n:i + 12 + n])[0]:
        sys.exit(f"report_check: {p}: bad CRC in its {t.decode()} chunk")
    if t == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", d[:10])
    if t == b"IDAT": idat += d
    i += 12 + n
raw = zlib.decompress(idat)
bpp = {2: 3, 6: 4, 0: 1, 4: 2, 3: 1}[ctype] * depth // 8
if len(raw) != h * (1 + w * bpp):
    sys.exit(f"report_check: {p}: {len(raw)} bytes of pixels, {w}x{h} needs {h * (1 + w * bpp)}")
PY
done
[ "$n" -gt 0 ] || { echo "report_check: the rendered page has no images"; bad=1; }
mkdir -p "$(dirname "$shot")"
timeout 120 "$chrome" "${flags[@]}" --window-size=1280,1600 --screenshot="$shot" "$page" > /dev/null 2>&1 ||
  { echo "report_check: chromium could not take the screenshot"; bad=1; }
t2=$(date +%s.%N)
printf 'report_check: %d sections, %d images checked; chromium rendered the DOM in %.1f s, the screenshot in %.1f s -> %s\n' \
  "$(grep -c '<section id=' "$tmp/dom.html")" "$n" "$(awk "BEGIN{print $t1 - $t0}")" "$(awk "BEGIN{print $t2 - $t1}")" "$shot"
exit $bad
