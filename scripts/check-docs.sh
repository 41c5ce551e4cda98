#!/usr/bin/env bash
# Builds every DocC catalog of the package (Sources/MODULE/*.docc) against the module's
# symbol graph, with warnings as errors: an unresolved symbol or article link, a broken
# doc comment or a malformed page fails. Also fails when a module's landing page leaves a
# top-level symbol out of its `## Topics`.
#
#   scripts/check-docs.sh [--scratch-path DIR]
#
# DIR (default .build-docs, git-ignored) holds the build, the symbol graphs and the archives
# (DIR/docs/MODULE.doccarchive). A new catalog is picked up without changes here; set DOCC
# to use another docc.
set -euo pipefail
cd "$(dirname "$0")/.."

scratch=.build-docs
while [ $# -gt 0 ]; do
    case "$1" in
        --scratch-path) scratch=$2; shift 2 ;;
        --scratch-path=*) scratch=${1#*=}; shift ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

# Tools of the toolchain: on PATH, next to `swift`, or through xcrun (Xcode).
toolchain_bin=$(dirname "$(readlink -f "$(command -v swift)")")
find_tool() {
    if command -v "$1" >/dev/null 2>&1; then
        command -v "$1"
    elif [ -x "$toolchain_bin/$1" ]; then
        echo "$toolchain_bin/$1"
    elif command -v xcrun >/dev/null 2>&1 && xcrun --find "$1" 2>/dev/null; then
        :
    else
        echo "error: $1 not found; it comes with the Swift toolchain" >&2
        return 1
    fi
}
docc=${DOCC:-$(find_tool docc)}
extract=$(find_tool swift-symbolgraph-extract)

shopt -s nullglob
catalogs=(Sources/*/*.docc)
if [ ${#catalogs[@]} -eq 0 ]; then
    echo "error: no DocC catalog under Sources/" >&2
    exit 1
fi

# Symbol graphs as SwiftPM's documentation tooling makes them: build, then extract each
# documented module's public symbols — without those it re-exports, which its own catalog
# does not document. (`swift package dump-symbol-graph` does the same, but also extracts
# the synthesized test modules and fails on them with this toolchain.) A build directory of
# its own keeps other builds' flags from forcing rebuilds.
build="$scratch/docs/build"
echo "==> Build"
swift build --scratch-path "$build"
bin=$(swift build --scratch-path "$build" --show-bin-path)
triple=$(swift -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["target"]["triple"])')
sdk=()
if [ "$(uname)" = Darwin ]; then
    sdk=(-sdk "$(xcrun --show-sdk-path)")
fi

for catalog in "${catalogs[@]}"; do
    module=$(basename "$(dirname "$catalog")")
    echo "==> $catalog"
    graphs="$scratch/docs/$module.symbol-graphs"
    rm -rf "$graphs"
    mkdir -p "$graphs"
    if ! "$extract" -module-name "$module" -target "$triple" ${sdk[@]+"${sdk[@]}"} \
        -I "$bin/Modules" -I "$bin" -module-cache-path "$bin/ModuleCache" \
        -minimum-access-level public -output-dir "$graphs"; then
        echo "error: no symbol graph for module $module; a catalog belongs in its module's folder, Sources/MODULE/" >&2
        exit 1
    fi
    archive="$scratch/docs/$module.doccarchive"
    rm -rf "$archive"
    "$docc" convert "$catalog" \
        --additional-symbol-graph-dir "$graphs" \
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
