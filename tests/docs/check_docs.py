#!/usr/bin/env python3
"""The docs as CI checks them (standard library only).

  check_docs.py links ROOT   every relative link and #anchor of every Markdown file resolves
  check_docs.py flags ROOT   every --flag a command of the docs gives a subcommand, and every flag
                             a flags table (| flag | ... | subcommands |) gives one, is one of its
                             flags in docs/cli.md (the reference generated from the parser)
  check_docs.py selftest     both checks fail on a made-up tree with a broken link, a broken
                             anchor and an unknown flag, and pass once they are mended

A link is [text](target) or ![alt](target) outside code; http(s) and mailto links are not
fetched. An anchor must be the GitHub slug of a heading of the target file (or of this file
for #anchor alone), or an explicit <a id="..."> / <a name="...">. Exit 1, naming file and line,
on the first run of failures.
"""
import os
import re
import sys

SKIP_DIRS = {".git", "node_modules", "build", "third_party"}
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def markdown_files(root):
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for name in sorted(files):
            if name.endswith(".md"):
                yield os.path.join(directory, name)


def prose_lines(path):
    """(line number, text) of the lines outside fenced and indented code blocks."""
    inside = False
    previous_blank = True
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if FENCE.match(line):
                inside = not inside
                continue
            if inside:
                continue
            # An indented block (4 spaces after a blank line, not inside a list) is code.
            if previous_blank and line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|")):
                continue
            previous_blank = not line.strip()
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)  # keeps letters and digits of any script, _ and -
    return text.replace(" ", "-")


anchor_cache = {}


def anchors(path):
    if path not in anchor_cache:
        found, counts = set(), {}
        for _, line in prose_lines(path):
            for explicit in EXPLICIT_ANCHOR.findall(line):
                found.add(explicit)
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        anchor_cache[path] = found
    return anchor_cache[path]


def check_links(root):
    failures = checked = 0
    for path in markdown_files(root):
        rel = os.path.relpath(path, root)
        for number, line in prose_lines(path):
            for target in LINK.findall(INLINE_CODE.sub("", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                checked += 1
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(dest):
                    print(f"FAIL: {rel}:{number}: link to {target}: {os.path.relpath(dest, root)} does not exist")
                    failures += 1
                elif anchor:
                    if not dest.endswith(".md"):
                        print(f"FAIL: {rel}:{number}: link to {target}: an anchor into a file that is not Markdown")
                        failures += 1
                    elif anchor not in anchors(dest):
                        print(f"FAIL: {rel}:{number}: link to {target}: no heading of "
                              f"{os.path.relpath(dest, root)} has the anchor #{anchor}")
                        failures += 1
    if failures:
        print(f"{failures} broken link(s) of {checked}")
        return 1
    print(f"every relative link and anchor of the Markdown files resolves ({checked} links)")
    return 0


# ----------------------------------------------------------------------------------------- flags
def cli_reference(root):
    """{"train": {"--steps", "-b", ...}, "bench layouts": {...}} from docs/cli.md's sections."""
    commands, current = {}, None
    with open(os.path.join(root, "docs", "cli.md"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^#{2,3} `boostlm ([a-z -]+)`", line)
            if m:
                current = commands.setdefault(m.group(1).strip(), set())
                continue
            if current is not None and re.match(r"^ {1,4}-", line):
                # an option line of CLI11's help, "  -b,--batch-size INT  sequences per ...": its
                # names are before the first run of two spaces (the description's continuation
                # lines are indented further, and are not read)
                names = line.strip().split("  ")[0]
                current.update(re.findall(r"(?:^|[ ,])(--?[A-Za-z][\w-]*)", names))
    return commands


def commands_in(path):
    """(line number, command) for every boostlm command of the file: the lines of its code blocks
    (continuations joined) and its inline code spans that start with boostlm."""
    inside = False
    pending, start = "", 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if FENCE.match(line):
                inside = not inside
                continue
            if inside:
                if not pending:
                    start = number
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                text, pending = pending + line, ""
                text = re.sub(r"\s+#.*$", "", text)
                m = re.search(r"(?:^|[\s(])(?:\S*/)?boostlm (.*)$", text)
                if m:
                    yield start, m.group(1)
            else:
                for _, code in INLINE_CODE.findall(line):
                    m = re.match(r"^(?:\S*/)?boostlm (.*)$", code.strip())
                    if m:
                        yield number, m.group(1)
                    elif re.match(r"^[a-z]+( [a-z]+)? --?[A-Za-z]", code.strip()):
                        yield number, code.strip()  # `train --resume DIR`: checked if train is one


def flag_table_entries(path, reference):
    """(line, flag, subcommand) for each row of a table headed | flag | ... | subcommands | ...:
    every flag of its first column with every subcommand its subcommands column names (words in
    parentheses are remarks, not subcommands; `bench` stands for any of its subcommands)."""
    columns = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.startswith("|"):
                columns = None
                continue
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if columns is None:
                lowered = [cell.lower() for cell in cells]
                columns = (0, lowered.index("subcommands")) if lowered[:1] == ["flag"] and "subcommands" in lowered else False
                continue
            if not columns or set(line.strip()) <= set("|-: "):
                continue
            flags = re.findall(r"`(--?[A-Za-z][\w-]*)`", cells[0].split("(")[0])
            named = re.sub(r"\([^)]*\)", "", cells[columns[1]])
            subcommands = {w for w in re.findall(r"bench \w+|\w+", named) if w in reference}
            for flag in flags:
                for name in sorted(subcommands):
                    yield number, flag, name


def split_command(words, reference):
    """The subcommand a command line names (one or two words) and the words after it."""
    if len(words) >= 2 and f"{words[0]} {words[1]}" in reference:
        return f"{words[0]} {words[1]}", words[2:]
    if words and words[0] in reference:
        return words[0], words[1:]
    return None, words


def check_flags(root):
    reference = cli_reference(root)
    if not reference:
        print("FAIL: docs/cli.md has no `boostlm <command>` sections (scripts/gen-cli-docs.sh)")
        return 1
    failures = checked = 0
    for path in markdown_files(root):
        rel = os.path.relpath(path, root)
        if rel == os.path.join("docs", "cli.md"):
            continue
        for number, command in commands_in(path):
            # `launch [its flags] -- train [train's flags]`: each part against its own command.
            for part in re.split(r"\s--\s", f" {command} "):
                words = re.findall(r"\"[^\"]*\"|'[^']*'|\S+", part)
                name, rest = split_command(words, reference)
                if name is None:
                    continue
                for word in rest:
                    flag = word.split("=", 1)[0]
                    if not re.fullmatch(r"--?[A-Za-z][\w-]*", flag) or flag == "--":
                        continue
                    checked += 1
                    if flag not in reference[name]:
                        print(f"FAIL: {rel}:{number}: `boostlm {name}` has no flag {flag} "
                              f"(docs/cli.md): {command}")
                        failures += 1
    for path in markdown_files(root):
        for number, flag, name in flag_table_entries(path, reference):
            checked += 1
            if flag not in reference[name] and not any(
                    flag in flags for sub, flags in reference.items() if sub.startswith(name + " ")):
                print(f"FAIL: {os.path.relpath(path, root)}:{number}: the flags table gives {flag} to "
                      f"`boostlm {name}`, which has no such flag (docs/cli.md)")
                failures += 1
    if failures:
        print(f"{failures} unknown flag(s) of {checked}")
        return 1
    print(f"every flag the docs give a boostlm command is one of its flags ({checked} flags)")
    return 0


def selftest():
    """A check that cannot fail is not a check: each must fail on what it is for."""
    import contextlib
    import io
    import tempfile

    def write(root, name, text):
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "w", encoding="utf-8") as f:
            f.write(text)

    def run(check, root):
        anchor_cache.clear()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = check(root)
        return code, out.getvalue()

    cli = "## `boostlm train`\n\n```text\nOptions:\n  -h,--help  help\n  --steps INT=1000  steps\n```\n"
    cases = [  # (what, README.md, docs/a.md, fragment the failure names)
        ("a broken link", "[a](docs/b.md)\n", "# A page\n", "docs/b.md does not exist"),
        ("a broken anchor", "[a](docs/a.md#nowhere)\n", "# A page\n", "anchor #nowhere"),
        ("an anchor of this file", "[x](#missing)\n# Title\n", "# A page\n", "anchor #missing"),
        ("an unknown flag", "x\n", "```sh\n./build/boostlm train --stepz 3\n```\n", "has no flag --stepz"),
        ("a flag table's unknown flag", "x\n", "| flag | meaning | subcommands |\n|---|---|---|\n| `--stepz` | s | train |\n",
         "gives --stepz"),
    ]
    failures = 0
    for what, readme, page, fragment in cases:
        with tempfile.TemporaryDirectory() as root:
            write(root, "README.md", readme)
            write(root, "docs/a.md", page)
            write(root, "docs/cli.md", cli)
            check = check_flags if "flag" in what else check_links
            code, out = run(check, root)
            if code == 0 or fragment not in out:
                print(f"FAIL: selftest: {what} was not reported ({out.strip()})")
                failures += 1
    with tempfile.TemporaryDirectory() as root:  # and the mended tree passes both
        write(root, "README.md", "[a](docs/a.md#a-page) [b](#title)\n# Title\n")
        write(root, "docs/a.md", "# A page\n```sh\n./build/boostlm train --steps 3\n```\n")
        write(root, "docs/cli.md", cli)
        for check in (check_links, check_flags):
            code, out = run(check, root)
            if code != 0:
                print(f"FAIL: selftest: a sound tree failed: {out.strip()}")
                failures += 1
    anchor_cache.clear()
    if failures:
        return 1
    print(f"the checks fail on each of {len(cases)} broken trees and pass the mended one")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["selftest"]:
        sys.exit(selftest())
    if len(sys.argv) != 3 or sys.argv[1] not in ("links", "flags"):
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[2])
    sys.exit(check_links(root) if sys.argv[1] == "links" else check_flags(root))
