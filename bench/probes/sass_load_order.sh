#!/usr/bin/env bash
# Probe helper (not part of the toolkit): for each kernel of a CUDA binary whose name matches $2, the
# order in which its SASS issues gate_up's loads and its first decode (s: a scale load: 1 or 2 bytes, or 4 after the first code load;
# C: a 16-byte code load, d: an 8-byte load, l: another load, D: the first E2M1/INT4 decode
# instruction, M: an mma, |: a barrier, b: a branch; the first 60 events). Used for the finding
# "ptxas decoded before the last scale loads" in bench/NOTES.md ("down split along its K").
# Usage: sass_load_order.sh BINARY NAME_REGEX        (needs cuobjdump: run it on the device)
set -euo pipefail
cuobjdump -sass "$1" | awk -v pat="$2" '
/Function : /{ if (name != "") print name ": " seq; name=""; seq=""; n=0; if ($3 ~ pat) name=$3 }
name != "" && /LDG|BAR.SYNC|0x80008000|0x88888888|HMMA|BRA/ { n++; if (n > 60) next;
  if ($0 ~ /LDG.E.U16/ || $0 ~ /LDG.E.U8/ || $0 ~ /LDG.E.CONSTANT/ && seq ~ /C/) seq=seq " s"; else if ($0 ~ /LDG.E.NA/) seq=seq " C";
  else if ($0 ~ /LDG.E.64/) seq=seq " d"; else if ($0 ~ /LDG/) seq=seq " l"; else if ($0 ~ /BAR/) seq=seq " |";
  else if ($0 ~ /HMMA/) seq=seq " M"; else if ($0 ~ /BRA/) seq=seq " b"; else if (seq !~ /D$/) seq=seq " D" }
END { if (name != "") print name ": " seq }'
