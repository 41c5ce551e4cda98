#!/usr/bin/env bash
# Builds every DocC catalog of the package (Sources/MODULE/*.docc) against the module's
# symbol graph, with warnings as errors: an unresolved symbol or article link, a broken
# doc comment or a malformed page fails. Also fails when a module's landing page leaves a
# top-level symbol out of its `## Topics`.
#
#   scripts/check-docs.sh [--scratch-path DIR]
#
# DIR (default .build-docs, git-ignored) holds the symbol-graph build and the archives
# (DIR/docs/MODULE.doccarchive). A new catalog is picked up without changes here.
set -euo pipefail
cd "$(dirname "$0")/.."

scratch=.build-docs
while [ $# -gt 0 ]; do
    case "$1" in
        --scratch-path) scratch=$2; shift 2 ;;
        --scratch-path=*) scratch=${1#*=}; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

# docc ships with the toolchain: next to `swift` on Linux, through xcrun with Xcode.
if [ -n "${DOCC:-}" ]; then
    docc=("$DOCC")
elif command -v docc >/dev/null 2>&1; then
    docc=(docc)
elif [ -x "$(dirname "$(readlink -f "$(command -v swift)")")/docc" ]; then
    docc=("$(dirname "$(readlink -f "$(command -v swift)")")/docc")
elif command -v xcrun >/dev/null 2>&1 && xcrun --find docc >/dev/null 2>&1; then
    docc=(xcrun docc)
else
    echo "error: docc not found; it comes with the Swift toolchain (or set DOCC=/path/to/docc)" >&2
    exit 1
fi

shopt -s nullglob
catalogs=(Sources/*/*.docc)
if [ ${#catalogs[@]} -eq 0 ]; then
    echo "error: no DocC catalog under Sources/" >&2
    exit 1
fi

# Symbol graphs straight from the compiler: `swift package dump-symbol-graph` also extracts
# the synthesized test modules, and fails on them with this toolchain. A build directory of
# its own keeps these flags from invalidating other builds.
build="$scratch/docs/build"
graphs="$build/symbol-graphs"
mkdir -p "$graphs"
echo "==> Symbol graphs"
swift build --scratch-path "$build" \
    -Xswiftc -emit-symbol-graph -Xswiftc -emit-symbol-graph-dir -Xswiftc "$(cd "$graphs" && pwd)"

for catalog in "${catalogs[@]}"; do
    module=$(basename "$(dirname "$catalog")")
    echo "==> $catalog"
    if [ ! -f "$graphs/$module.symbols.json" ]; then
        echo "error: no symbol graph for module $module; is $catalog in its module's folder? (if so, delete $build and retry)" >&2
        exit 1
    fi
    # The module's graph and its extensions of other modules' types, and nothing else: a
    # catalog documents exactly one module.
    input="$scratch/docs/$module.symbol-graphs"
    rm -rf "$input"
    mkdir -p "$input"
    cp "$graphs/$module.symbols.json" "$graphs/$module"@*.symbols.json "$input/"
    archive="$scratch/docs/$module.doccarchive"
    rm -rf "$archive"
    "${docc[@]}" convert "$catalog" \
        --additional-symbol-graph-dir "$input" \
        --output-path "$archive" \
        --fallback-display-name "$module" \
        --fallback-bundle-identifier "$module" \
        --analyze \
        --warnings-as-errors

    # DocC lists each symbol the landing page does not curate under a generated section.
    python3 - "$archive" "$module" <<'PYTHON'
import json, pathlib, sys
archive, module = pathlib.Path(sys.argv[1]), sys.argv[2]
page = json.loads((archive / "data" / "documentation" / f"{module.lower()}.json").read_text())
uncurated = [reference.rsplit("/", 1)[-1]
             for section in page.get("topicSections", []) if section.get("generated")
             for reference in section["identifiers"]]
if uncurated:
    print(f"error: the landing page of {module} does not list these symbols under '## Topics': "
          + ", ".join(uncurated), file=sys.stderr)
    sys.exit(1)
print(f"{module}: every top-level symbol is curated")
PYTHON
done
echo "All documentation catalogs build without warnings."
