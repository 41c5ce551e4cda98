#!/usr/bin/env python3
"""Keeps the code samples of the README and the DocC articles identical to compiled sources.

A sample in README.md, in a DocC catalog (Sources/*/*.docc) or in an integration's README
(Integrations/*/README.md) sits between `<!-- snippet: NAME -->` and `<!-- end snippet -->`.
Its source is the region between `// snippet: NAME` and `// end snippet` in a file under
Tests/ or Integrations/*/Tests/ (compiled and run by `swift test` and CI's integration
steps). `--check` fails if any sample differs; without it, the documents are rewritten from
the sources.
"""
import pathlib
import re
import sys
import textwrap

root = pathlib.Path(__file__).resolve().parent.parent
readme_path = root / "README.md"

sources = {}
test_directories = [root / "Tests"] + sorted((root / "Integrations").glob("*/Tests"))
for path in sorted(path for directory in test_directories for path in directory.rglob("*.swift")):
    for match in re.finditer(r"^[ \t]*// snippet: (\S+)\n(.*?)^[ \t]*// end snippet", path.read_text(), re.M | re.S):
        sources[match.group(1)] = textwrap.dedent(match.group(2)).rstrip("\n")

documents = [readme_path] + sorted((root / "Sources").glob("*/*.docc/**/*.md")) + sorted((root / "Integrations").glob("*/README.md"))
# A sample never reaches into the next one, even when it is empty or broken.
pattern = re.compile(r"(<!-- snippet: (\S+) -->\n```swift\n)((?:(?!<!-- (?:end )?snippet).)*?)(\n```\n<!-- end snippet -->)", re.S)
problems = []
updates = {}
count = 0

for document in documents:
    name = document.relative_to(root)
    text = document.read_text()

    def replace(match):
        snippet = match.group(2)
        if snippet not in sources:
            problems.append(f"{name}: snippet '{snippet}' has no source region '// snippet: {snippet}' under Tests/ or Integrations/*/Tests/")
            return match.group(0)
        if match.group(3) != sources[snippet]:
            problems.append(f"{name}: snippet '{snippet}' differs from its compiled source")
        return match.group(1) + sources[snippet] + match.group(4)

    updates[document] = pattern.sub(replace, text)
    count += len(pattern.findall(text))
    if document == readme_path and not pattern.search(text):
        problems.append("README.md has no snippets")

if "--check" in sys.argv:
    for problem in problems:
        print("error:", problem, file=sys.stderr)
    if problems:
        print("run: python3 scripts/readme-snippets.py", file=sys.stderr)
        sys.exit(1)
    print(f"{count} snippets in README.md, DocC articles and integration READMEs match their sources")
else:
    for document, text in updates.items():
        if text != document.read_text():
            document.write_text(text)
            print(f"{document.relative_to(root)} updated")
