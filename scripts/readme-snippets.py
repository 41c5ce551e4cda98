#!/usr/bin/env python3
"""Keeps the README's code samples identical to compiled sources.

A sample in README.md sits between `<!-- snippet: NAME -->` and `<!-- end snippet -->`.
Its source is the region between `// snippet: NAME` and `// end snippet` in a file under
Tests/ (compiled and run by `swift test`). `--check` fails if any sample differs;
without it, the README is rewritten from the sources.
"""
import pathlib
import re
import sys
import textwrap

root = pathlib.Path(__file__).resolve().parent.parent
readme_path = root / "README.md"

sources = {}
for path in sorted((root / "Tests").rglob("*.swift")):
    for match in re.finditer(r"^[ \t]*// snippet: (\S+)\n(.*?)^[ \t]*// end snippet", path.read_text(), re.M | re.S):
        sources[match.group(1)] = textwrap.dedent(match.group(2)).rstrip("\n")

readme = readme_path.read_text()
pattern = re.compile(r"(<!-- snippet: (\S+) -->\n```swift\n)(.*?)(\n```\n<!-- end snippet -->)", re.S)
problems = []

def replace(match):
    name = match.group(2)
    if name not in sources:
        problems.append(f"README snippet '{name}' has no source region '// snippet: {name}' under Tests/")
        return match.group(0)
    if match.group(3) != sources[name]:
        problems.append(f"README snippet '{name}' differs from its compiled source")
    return match.group(1) + sources[name] + match.group(4)

updated = pattern.sub(replace, readme)
if not pattern.search(readme):
    problems.append("README.md has no snippets")

if "--check" in sys.argv:
    for problem in problems:
        print("error:", problem, file=sys.stderr)
    if problems:
        print("run: python3 scripts/readme-snippets.py", file=sys.stderr)
        sys.exit(1)
    print(f"{len(pattern.findall(readme))} README snippets match their sources")
else:
    readme_path.write_text(updated)
    print("README.md updated")
