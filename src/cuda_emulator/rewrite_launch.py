#!/usr/bin/env python3
"""Turns a CUDA source file into C++ for the emulated device (BOOSTLM_CUDA=EMULATE).

Only what C++ cannot spell is rewritten; everything else stays byte for byte, line for line (a
#line directive keeps file names and line numbers those of the .cu file):

  kernel<<<grid, block, smem, stream>>>(args)
    -> ::cuda_emulator::launch(<kernel's address, if it has one>, [=](const auto&... a) { kernel(a...); },
                               "kernel", __FILE__, __LINE__,
                               ::cuda_emulator::launch_config(grid, block, smem, stream))(args)
  __shared__ T a, b[N];
    -> auto& a = ::cuda_emulator::device::shared_variable<T>([] {});
       auto& b = ::cuda_emulator::device::shared_variable<T[N]>([] {});
  extern __shared__ T s[];
    -> T* const s = ::cuda_emulator::device::dynamic_shared_array<T>();

Why a rewrite and not a macro: the chevrons are not C++ (no macro can match them), and a static
__shared__ variable must be one object per block, which a C++ declaration cannot say; editing
the .cu files to use a launch macro would change what nvcc compiles, and the point is to run the
very sources nvcc builds. Each shared declaration's lambda gives it a type of its own per template
instantiation: the key under which the executor finds the block's copy (GCC 12 ignores section()
on static locals of function templates, so a linker-section registry would not work).

Usage: rewrite_launch.py INPUT.cu OUTPUT.cpp
"""

import re
import sys

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def code_mask(text):
    """The text with comments and string/char literals blanked (same length, newlines kept)."""
    out = list(text)
    i, n = 0, len(text)

    def blank(start, end):
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            open_paren = text.find("(", i + 2)
            delimiter = text[i + 2 : open_paren]
            end = text.find(")" + delimiter + '"', open_paren)
            end = n if end < 0 else end + len(delimiter) + 2
            blank(i, end)
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
                i += 1  # a digit separator (1'000), not a character literal
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            blank(i, min(j + 1, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def matching_forward(mask, start, opening, closing):
    """Index of the bracket closing the one at `start` (balancing all bracket kinds)."""
    depth = 0
    for k in range(start, len(mask)):
        c = mask[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                if c != closing:
                    raise SyntaxError(f"unbalanced {opening}{closing} at offset {start}")
                return k
    raise SyntaxError(f"no closing {closing} for offset {start}")


def callee_start(mask, end):
    """Start of the kernel expression ending before `end`: a qualified name, maybe with <...>."""
    k = end
    while k > 0 and mask[k - 1].isspace():
        k -= 1
    if mask[k - 1] == ">":
        angle = paren = 0
        while True:
            k -= 1
            c = mask[k]
            if c == ">":
                angle += 1
            elif c == "<":
                angle -= 1
            elif c == ")":
                paren += 1
            elif c == "(":
                paren -= 1
            if angle == 0 and paren == 0:
                break
        while k > 0 and mask[k - 1].isspace():
            k -= 1
    while k > 0 and (mask[k - 1].isalnum() or mask[k - 1] in "_:"):
        k -= 1
    return k


def launch_edits(text, mask):
    edits = []
    for found in re.finditer(r"<<<", mask):
        chevrons = found.start()
        depth, k = 0, found.end()
        while True:
            if k >= len(mask):
                raise SyntaxError(f"no >>> after the <<< at offset {chevrons}")
            c = mask[k]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif depth == 0 and mask.startswith(">>>", k):
                break
            k += 1
        close = k
        after = close + 3
        while after < len(mask) and mask[after].isspace():
            after += 1
        if after >= len(mask) or mask[after] != "(":
            raise SyntaxError(f"the launch at offset {chevrons} has no argument list")
        start = callee_start(mask, chevrons)
        name = " ".join(text[start:chevrons].split())
        address = (
            "[&](auto cuda_emulator_tag) -> const void* { if constexpr (requires { "
            f"::cuda_emulator::kernel_address(cuda_emulator_tag, {name}); }}) return "
            f"::cuda_emulator::kernel_address(cuda_emulator_tag, {name}); else return nullptr; }}(0)"
        )
        body = f"[=](const auto&... cuda_emulator_args) {{ {name}(cuda_emulator_args...); }}"
        newlines = "\n" * text[start:chevrons].count("\n")
        edits.append(
            (
                start,
                chevrons + 3,
                f'::cuda_emulator::launch({address}, {body}, "{name}", __FILE__, __LINE__, '
                f"::cuda_emulator::launch_config({newlines}",
            )
        )
        edits.append((close, close + 3, "))"))
    return edits


def split_top_level(text):
    parts, depth, start = [], 0, 0
    for k, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


def declarator(part):
    """(type prefix, name, array suffix) of `T name[N][M]` (the prefix may be empty)."""
    part = part.strip()
    suffix_start = len(part)
    while part[:suffix_start].rstrip().endswith("]"):
        end = part[:suffix_start].rstrip()
        depth = 0
        for k in range(len(end) - 1, -1, -1):
            if end[k] == "]":
                depth += 1
            elif end[k] == "[":
                depth -= 1
                if depth == 0:
                    suffix_start = k
                    break
    head = part[:suffix_start].rstrip()
    match = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", head)
    if not match:
        raise SyntaxError(f"cannot read the __shared__ declarator {part!r}")
    return head[: match.start()].strip(), match.group(0), part[suffix_start:].strip()


def shared_edits(text, mask):
    edits = []
    for found in re.finditer(r"\b__shared__\b", mask):
        begin = found.start()
        prefix = re.search(r"\b(extern|static)\s+$", mask[:begin])
        if prefix:
            begin = prefix.start()
        end = mask.find(";", found.end())
        body = text[found.end() : end]
        newlines = "\n" * text[begin:end].count("\n")
        if prefix and prefix.group(1) == "extern":
            type_, name, suffix = declarator(body)
            if suffix.replace(" ", "") != "[]":
                raise SyntaxError(f"extern __shared__ {body.strip()}: expected an unsized array")
            replacement = (
                f"{type_}* const {name} = "
                f"::cuda_emulator::device::dynamic_shared_array<{type_}>()"
            )
        else:
            parts = split_top_level(body)
            type_, name, suffix = declarator(parts[0])
            declarations = [(name, suffix)] + [declarator(p)[1:] for p in parts[1:]]
            replacement = "; ".join(
                f"auto& {n} = ::cuda_emulator::device::shared_variable<{type_}{s}>([] {{}})"
                for n, s in declarations
            )
        edits.append((begin, end, replacement + newlines))
    return edits


def rewrite(text, path):
    mask = code_mask(text)
    edits = sorted(launch_edits(text, mask) + shared_edits(text, mask), key=lambda e: e[0])
    out, position = [], 0
    for start, end, replacement in edits:
        if start < position:
            raise SyntaxError(f"overlapping rewrites at offset {start}")
        out.append(text[position:start])
        out.append(replacement)
        position = end
    out.append(text[position:])
    return f'#line 1 "{path}"\n' + "".join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: rewrite_launch.py INPUT.cu OUTPUT.cpp")
    source, target = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    try:
        rewritten = rewrite(text, source)
    except SyntaxError as e:
        sys.exit(f"{source}: {e}")
    with open(target, "w", encoding="utf-8") as f:
        f.write(rewritten)


if __name__ == "__main__":
    main()
