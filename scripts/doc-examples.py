#!/usr/bin/env python3
"""Compiles every ```swift example of the libraries' documentation, so none can rot.

What is compiled: each ```swift block in a `///` doc comment of a public declaration of
`RetryingOperation` and `PersistentOperations` (what users read in DocC), and each ```swift
block of their DocC articles (`Sources/<module>/<module>.docc/**/*.md`) except the samples
between `<!-- snippet: NAME -->` markers, which `scripts/readme-snippets.py` keeps identical
to sources under Tests/ that `swift test` compiles and runs. The examples in doc comments of
`package` and internal declarations (of those modules and of `store-inspector`) are compiled
too, inside a copy of their own module, where those declarations are visible.

How: the script generates one package (in the git-ignored `.build-doc-examples/`) that
depends on this repository by path, with one target per library. Each example becomes one
file of its library's target:

- an example made of statements (types it declares are then local) is the body of a method
  `func run() async throws` of a `RetryingOperation` subclass, as an example that calls
  `baseOperationEnded()` or passes `self` is written to be;
- an example made of members (`override func …`, `override var …`) is the body of such a
  subclass;
- an example that declares an `extension` or a `@Test` is compiled at file level.

Names an example leaves undefined — the `queue`, `operation` or `storeURL` it talks about,
the app's own `uploader` or `api` — come from a prelude per target
(`scripts/doc-examples/<module>Prelude.swift`): stubs with the types the prose implies.

The package is built once, in Swift 6 mode. Every error fails the run, and so does every
warning except those an isolated example cannot avoid (a value it declares and never uses,
a `var` it never mutates, a `try` or `await` on a stub that does not throw or suspend).

    python3 scripts/doc-examples.py            # build; print each failing example's origin
    python3 scripts/doc-examples.py --list     # list the examples found
"""
import pathlib
import re
import shutil
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
scratch = root / ".build-doc-examples"
preludes = root / "scripts" / "doc-examples"
modules = ["RetryingOperation", "PersistentOperations"]

# Warnings an isolated example cannot avoid; anything else fails the run.
tolerated_warnings = [
    r"was never used",
    r"was never mutated",
    r"never used; consider replacing",
    r"no calls to throwing functions occur within 'try' expression",
    r"no 'async' operations occur within 'await' expression",
    r"result of call to .* is unused",
    r"expression of type .* is unused",
]


def doc_comment_examples(path, public=True):
    """The ```swift blocks of the `///` comments of public declarations in `path` (with
    `public=False`: of the other declarations)."""
    lines = path.read_text().splitlines()
    found = []
    index = 0
    while index < len(lines):
        if not lines[index].strip().startswith("///"):
            index += 1
            continue
        start = index
        while index < len(lines) and lines[index].strip().startswith("///"):
            index += 1
        comment = [re.sub(r"^\s*/// ?", "", line) for line in lines[start:index]]
        declaration = index
        while declaration < len(lines) and lines[declaration].strip().startswith("@") and not lines[declaration].strip().startswith("@available"):
            declaration += 1
        text = lines[declaration].strip() if declaration < len(lines) else ""
        is_public = bool(re.search(r"\b(public|open)\b", text) or text.startswith("case ") or text.startswith("@available"))
        if is_public != public:
            continue
        line = 0
        while line < len(comment):
            if comment[line].strip() == "```swift":
                end = line + 1
                while end < len(comment) and comment[end].strip() != "```":
                    end += 1
                found.append((start + line + 2, "\n".join(comment[line + 1:end])))
                line = end
            line += 1
    return found


def article_examples(path):
    """The ```swift blocks of a DocC article, except compiled snippets."""
    text = path.read_text()
    found = []
    for match in re.finditer(r"(<!-- snippet: \S+ -->\n)?```swift\n(.*?)\n```", text, re.S):
        if match.group(1):
            continue
        found.append((text[:match.start()].count("\n") + 2, match.group(2)))
    return found


def examples(module):
    directory = root / "Sources" / module
    result = []
    for path in sorted(directory.rglob("*.swift")):
        result += [(path.relative_to(root), line, code) for line, code in doc_comment_examples(path)]
    for path in sorted(directory.glob("*.docc/**/*.md")):
        result += [(path.relative_to(root), line, code) for line, code in article_examples(path)]
    return result


def wrap(number, code):
    """The example as the contents of one file."""
    lines = code.splitlines()
    if any(re.match(r"^(extension\b|@Test\b)", line) for line in lines):
        return code + "\n"
    if any(re.match(r"^(@\w+\s+)*(public |open )?override\b", line) for line in lines) and not any(
        re.match(r"^(final |open |public )*(class|struct|enum|actor)\b", line) for line in lines
    ):
        return f"final class Example{number}: ExampleOperation, @unchecked Sendable {{\n{textwrap_indent(code)}\n}}\n"
    body = textwrap_indent(textwrap_indent(code))
    # Synchronous unless it awaits, so that an example may block (`waitUntilFinished()`).
    effects = "async throws" if re.search(r"\bawait\b", code) else "throws"
    return (f"final class Example{number}: ExampleOperation, @unchecked Sendable {{\n"
            f"    func run() {effects} {{\n{body}\n    }}\n}}\n")


def textwrap_indent(code):
    return "\n".join(("    " + line) if line.strip() else "" for line in code.splitlines())


# The free names the examples of non-public declarations use, passed in as parameters of the
# function each of them becomes (a name the example declares itself is not passed).
internal_stubs = {
    "store": "RecordStore",
    "directory": "URL",
    "payload": "Data",
    "schedule": "(OperationRecord) -> Void",
    "log": "(String) -> Void",
}
internal_modules = {
    "RetryingOperation": ([], False),
    "PersistentOperations": (["RetryingOperation"], False),
    "StoreInspector": (["RetryingOperation", "PersistentOperations"], True),
}


def internal_examples(module):
    result = []
    for path in sorted((root / "Sources" / module).rglob("*.swift")):
        result += [(path.relative_to(root), line, code) for line, code in doc_comment_examples(path, public=False)]
    return result


def wrap_internal(number, code):
    parameters = [f"{name}: {kind}" for name, kind in internal_stubs.items()
                  if re.search(rf"\b{name}\b", code) and not re.search(rf"\b(let|var) {name}\b", code)]
    effects = "async throws" if re.search(r"\bawait\b", code) else "throws"
    return f"func internalDocumentationExample{number}({', '.join(parameters)}) {effects} {{\n{textwrap_indent(code)}\n}}\n"


def check_internal_examples():
    """Builds a package holding a copy of each module's sources plus its internal examples."""
    package = root / ".build-doc-examples-internal"
    if package.exists():
        for child in package.iterdir():
            if child.name != ".build":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    package.mkdir(exist_ok=True)
    origins = {}
    targets = []
    total = 0
    for module, (dependencies, is_executable) in internal_modules.items():
        source = root / "Sources" / module
        directory = package / "Sources" / module
        for path in source.rglob("*.swift"):
            if ".docc" in path.parts:
                continue
            copy = directory / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, copy)
        items = internal_examples(module)
        total += len(items)
        lines = ["// Generated by scripts/doc-examples.py: the examples of non-public declarations.", "import Foundation"]
        for dependency in dependencies:
            lines.append(f"import {dependency}")
        text = "\n".join(lines) + "\n"
        for number, (path, line, code) in enumerate(items, 1):
            first = text.count("\n") + 2
            origins[(module, first)] = (path, line)
            text += wrap_internal(number, code)
        (directory / "DocumentationExamples.swift").write_text(text)
        kind = "executableTarget" if is_executable else "target"
        listed = ", ".join(f'"{name}"' for name in dependencies)
        targets.append(f'        .{kind}(name: "{module}", dependencies: [{listed}]),')
    (package / "Package.swift").write_text(
        "// swift-tools-version:6.0\n"
        "// Generated by scripts/doc-examples.py: copies of the modules with their internal examples.\n"
        "import PackageDescription\n\n"
        "let package = Package(\n"
        '    name: "InternalDocExamples",\n'
        "    targets: [\n" + "\n".join(targets) + "\n    ],\n"
        "    swiftLanguageModes: [.v6]\n)\n"
    )
    print(f"building {total} examples of non-public declarations inside copies of their modules", flush=True)
    build = subprocess.run(["swift", "build", "--package-path", str(package)], capture_output=True, text=True)
    output = build.stdout + build.stderr
    problems = []
    for match in re.finditer(r"^(/\S+?/Sources/(\w+)/DocumentationExamples\.swift):(\d+):\d+: (error|warning): (.*)$", output, re.M):
        _, module, line, kind, message = match.groups()
        if kind == "warning" and any(re.search(pattern, message) for pattern in tolerated_warnings):
            continue
        starts = [first for (name, first) in origins if name == module and first <= int(line)]
        origin = origins.get((module, max(starts))) if starts else None
        where = f"{origin[0]}:{origin[1]}" if origin else f"{module}/DocumentationExamples.swift:{line}"
        problem = f"{where}: {kind}: {message}"
        if problem not in problems:
            problems.append(problem)
    if build.returncode != 0 and not problems:
        problems.append("the build of the module copies failed:\n" + output[-4000:])
    return total, problems


def main():
    found = {module: examples(module) for module in modules}
    if "--list" in sys.argv:
        for module, items in found.items():
            for path, line, _ in items:
                print(f"{path}:{line}")
        return 0

    if scratch.exists():
        for child in scratch.iterdir():
            if child.name != ".build":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    scratch.mkdir(exist_ok=True)
    origins = {}
    targets = []
    for module, items in found.items():
        target = module + "Examples"
        directory = scratch / "Sources" / target
        directory.mkdir(parents=True)
        shutil.copy(preludes / f"{module}Prelude.swift", directory / "Prelude.swift")
        for number, (path, line, code) in enumerate(items, 1):
            name = f"Example{number}.swift"
            header = f"// {path}:{line}\nimport Foundation\nimport Testing\nimport RetryingOperation\n"
            if module == "PersistentOperations":
                header += "import PersistentOperations\n"
            wrapped = wrap(number, code)
            (directory / name).write_text(header + wrapped)
            # The example's first line in the generated file.
            first = header.count("\n") + (0 if wrapped.startswith(code) else 1 if "override" in wrapped.splitlines()[1] else 2) + 1
            origins[(target, name)] = (path, line, first)
        # A path dependency's identity is its folder's name.
        products = [f'.product(name: "RetryingOperation", package: "{root.name}")']
        if module == "PersistentOperations":
            products.append(f'.product(name: "PersistentOperations", package: "{root.name}")')
        targets.append(f'        .target(name: "{target}", dependencies: [{", ".join(products)}]),')

    (scratch / "Package.swift").write_text(
        "// swift-tools-version:6.0\n"
        "// Generated by scripts/doc-examples.py: every documentation example, compiled.\n"
        "import PackageDescription\n\n"
        "let package = Package(\n"
        '    name: "DocExamples",\n'
        f'    dependencies: [.package(path: "{root}")],\n'
        "    targets: [\n" + "\n".join(targets) + "\n    ]\n)\n"
    )
    total = sum(len(items) for items in found.values())
    if any(not items for items in found.values()):
        print("error: no documentation examples found in " + ", ".join(m for m, items in found.items() if not items), file=sys.stderr)
        return 1
    print(f"building {total} documentation examples ({', '.join(f'{len(v)} in {k}' for k, v in found.items())})", flush=True)
    build = subprocess.run(["swift", "build", "--package-path", str(scratch)], capture_output=True, text=True)
    output = build.stdout + build.stderr

    problems = []
    seen = set()
    for match in re.finditer(r"^(/\S+?/Sources/(\w+)/(Example\d+|Prelude)\.swift):(\d+):\d+: (error|warning): (.*)$", output, re.M):
        file, target, name, line, kind, message = match.groups()
        if kind == "warning" and any(re.search(pattern, message) for pattern in tolerated_warnings):
            continue
        origin = origins.get((target, name + ".swift"))
        where = f"{origin[0]}:{origin[1]} (example line {int(line) - origin[2] + 1})" if origin else f"{target}/{name}.swift:{line}"
        key = (where, message)
        if key in seen:
            continue
        seen.add(key)
        problems.append(f"{where}: {kind}: {message}")
    if build.returncode != 0 and not problems:
        problems.append("the build failed:\n" + output[-4000:])
    internal_total, internal_problems = check_internal_examples()
    problems += internal_problems
    for problem in problems:
        print("error:", problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problems in documentation examples (generated packages: {scratch.relative_to(root)}, .build-doc-examples-internal)", file=sys.stderr)
        return 1
    print(f"all {total} documentation examples and {internal_total} examples of non-public declarations compile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
