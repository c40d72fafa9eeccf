#!/usr/bin/env python3
"""Checks the size rule outside tests: no file over 500 lines, no unit over 599, no function over 80.

Scans the C++ (*.cpp, *.hpp) and Python (*.py) files under the source folders
(schedule, models, sim, exec, calibration, cli, twin, plots, scripts, bench,
fuzz; never tests/, build*/ or examples/) and prints one line per offender:

    path: N lines (limit 500)
    path + path: N lines together (unit limit 599)
    path:line: function NAME is N lines (limit 80)

A unit is a C++ source with the header of the same name beside it
(sim/engine.cpp and sim/engine.hpp): together they stay under 600 lines.

A function counts from its head line (the first line of its declaration,
template line included) to its closing brace (C++) or last line (Python),
inclusive. In C++ a function body is found by brace matching, with comments,
string/char literals and preprocessor lines blanked first; lambdas and local
classes inside a function count as part of it. A lambda assigned to a variable
at namespace or class scope counts as a function named after the variable.
Namespaces, classes, structs, unions, enums, extern "C" blocks and braced
initialisers are not functions (the methods inside classes are).
Exits 1 when anything is over a limit, 0 with a one-line summary otherwise.

    python3 scripts/check_sizes.py [--root DIR] [--max-file 500] [--max-unit 599] [--max-function 80]
"""
import argparse
import ast
import os
import re
import sys

SOURCE_DIRS = ["schedule", "models", "sim", "exec", "calibration", "cli", "twin",
               "plots", "scripts", "bench", "fuzz"]
EXTENSIONS = (".cpp", ".hpp", ".py")


def skipped_dir(name):
    return (name == "tests" or name == "examples" or name.startswith("build")
            or name.startswith(".") or name == "__pycache__")


def source_files(root):
    for top in SOURCE_DIRS:
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if not skipped_dir(d))
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, f)


def line_count(text):
    return text.count("\n") + (0 if text == "" or text.endswith("\n") else 1)


# ---- C++: blank comments, literals and preprocessor lines -------------------

RAW_PREFIX = re.compile(r'(?:u8|u|U|L)?R"([^()\\\s"]{0,16})\(')


def _blank(s):
    """Keeps the newlines of s (so line numbers survive), spaces elsewhere."""
    return "".join(c if c == "\n" else " " for c in s)


def _in_number(text, i):
    """Whether the ' at i is a digit separator (1'000'000) rather than a char literal."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_'."):
        j -= 1
    return j < i and text[j].isdigit()


def strip_cpp(text):
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace so far on this line
    while i < n:
        c = text[i]
        if line_start and c == "#":  # preprocessor line, with its continuations
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 1
                elif text.startswith("/*", j):  # a block comment may run past the line
                    k = text.find("*/", j + 2)
                    j = n - 1 if k < 0 else k + 1
                j += 1
            out.append(_blank(text[i:j]))
            i = j
            continue
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(_blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + _blank(text[i + 1:j]))
            i = j
        elif c in "uULR" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) \
                and RAW_PREFIX.match(text, i):
            m = RAW_PREFIX.match(text, i)
            close = ")" + m.group(1) + '"'
            j = text.find(close, m.end())
            j = n if j < 0 else j + len(close)
            out.append('""' + _blank(text[i + 2:j]))
            i = j
        elif c == '"' or (c == "'" and not _in_number(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + _blank(text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


# ---- C++: classify the text before a brace at namespace or class scope -----

def _match_close(s, i, open_c, close_c):
    """Index of the bracket closing the one at s[i] (or len(s))."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_c:
            depth += 1
        elif s[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return len(s)


def _match_open(s, i, open_c, close_c):
    """Index of the bracket opening the one closed at s[i] (or -1)."""
    depth = 0
    for j in range(i, -1, -1):
        if s[j] == close_c:
            depth += 1
        elif s[j] == open_c:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _top_level(s):
    """Yields (index, char) of the characters of s outside (), [] and {}."""
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            yield i, c


def _strip_templates(h):
    while True:
        m = re.match(r"\s*template\s*<", h)
        if not m:
            return h
        depth, j = 0, m.end() - 1
        while j < len(h):
            if h[j] in "<(":
                depth += 1
            elif h[j] in ">)":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        h = h[j + 1:]


QUALIFIER_TAIL = re.compile(
    r"\s*(?:\bconst|\bvolatile|\bnoexcept|\boverride|\bfinal|\bmutable|\bconstexpr|\bconsteval"
    r"|\btry|&&|&|\[\[[^\]]*\]\])\s*$")
NOT_NAMES = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
             "alignas", "alignof", "noexcept", "throw", "static_assert", "requires", ""}


def _strip_qualifiers(h):
    """h without its trailing cv/ref/noexcept/override/try qualifiers."""
    while True:
        h = h.rstrip()
        m = QUALIFIER_TAIL.search(h)
        if m:
            h = h[:m.start()]
            continue
        if h.endswith(")"):
            o = _match_open(h, len(h) - 1, "(", ")")
            if o > 0 and re.search(r"\b(noexcept|throw)\s*$", h[:o]):
                h = h[:o]
                continue
        return h


def _init_list_colon(h):
    """Index of a constructor's member-initialiser ':' in h, or -1."""
    for i, c in _top_level(h):
        if c == ":" and h[i - 1:i] != ":" and h[i + 1:i + 2] != ":":
            if _strip_qualifiers(h[:i]).endswith(")"):
                return i
            return -1
    return -1


def _function_name(h):
    """The function's name if h (the head before its body) declares one, else None."""
    colon = _init_list_colon(h)
    if colon >= 0:
        h = h[:colon]
    for i, c in _top_level(h):  # a trailing return type or requires clause
        if (c == "-" and h[i + 1:i + 2] == ">") or (c == "r" and re.match(r"\brequires\b", h[i:])
                                                     and _strip_qualifiers(h[:i]).endswith(")")):
            h = h[:i]
            break
    h = _strip_qualifiers(h)
    if not h.endswith(")"):
        return None
    before = h[:_match_open(h, len(h) - 1, "(", ")")].rstrip()
    m = re.search(r"((?:[\w~]+\s*(?:<[^;{}]*>)?\s*::\s*)*operator\b.*)$", before)
    if m:
        return re.sub(r"\s+", " ", m.group(1)).strip()
    m = re.search(r"([\w:~]+(?:<[^;{}()]*>)?)$", before)
    name = m.group(1) if m else ""
    return None if name.split("::")[-1].split("<")[0] in NOT_NAMES else name


def _lambda_variable(h):
    """The variable's name if h is 'TYPE NAME = [captures](...)...', else None (no '=': '')."""
    for i, c in _top_level(h):
        if c != "=" or h[i + 1:i + 2] == "=" or h[i - 1:i] in "=!<>+-*/%&|^":
            continue
        if re.search(r"\boperator\s*\S*$", h[:i]):
            continue
        rhs = h[i + 1:].lstrip()
        if rhs.startswith("[") and not rhs.startswith("[["):
            m = re.search(r"(\w+)\s*$", h[:i])
            return m.group(1) if m else "lambda"
        return None
    return ""


ACCESS = re.compile(r"\s*(?:public|private|protected|signals|slots|Q_SLOTS)\s*:(?!:)")


def normalize(head):
    """head without attributes, access specifiers and template parameter lists."""
    h = re.sub(r"\[\[.*?\]\]", " ", head)
    while ACCESS.match(h):
        h = h[ACCESS.match(h).end():]
    return _strip_templates(h).strip()


def classify(head):
    """('function', name), ('scope', name) or ('other', None) for the text before a '{'."""
    h = normalize(head)
    if re.match(r"(?:inline\s+)?namespace\b", h):
        return "scope", ""
    lam = _lambda_variable(h)
    if lam is None:
        return "other", None  # an initialiser: 'T x = {...}'
    if lam:
        return "function", lam
    name = _function_name(h)
    if name is not None:
        return "function", name
    if re.search(r"\benum\b", h):
        return "other", None
    m = re.search(r"\b(?:class|struct|union)\b(?:\s+\w+\s*\(.*?\))?\s*(\w*)", h)
    if m:
        return "scope", m.group(1)
    if re.match(r'extern\s*"\s*"$', h):
        return "scope", ""
    return "other", None


# ---- C++: walk the scopes, brace by brace ----------------------------------

class CppScanner:
    def __init__(self, text):
        self.s = strip_cpp(text)
        self.line_at = []  # line number of each character
        line = 1
        for c in self.s:
            self.line_at.append(line)
            if c == "\n":
                line += 1
        self.functions = []  # (line, name, length)

    def line(self, i):
        return self.line_at[min(i, len(self.line_at) - 1)] if self.line_at else 1

    def match(self, i):
        return _match_close(self.s, i, "{", "}")

    def scan(self, i=0, prefix=""):
        """Scans a scope from i to its closing '}' (returned), recording functions."""
        s, n = self.s, len(self.s)
        head_start, depth = i, 0
        while i < n:
            c = s[i]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth = max(0, depth - 1)
            elif c == ";" and depth == 0:
                head_start = i + 1
            elif c == "}" and depth == 0:
                return i
            elif c == "{" and depth > 0:  # a lambda or braced value inside an expression
                i = self.match(i)
            elif c == "{":
                i, head_start = self._brace(i, head_start, prefix)
                continue
            i += 1
        return n

    def _brace(self, i, head_start, prefix):
        """Handles a '{' at scope level; returns (next index, next head start)."""
        s = self.s
        head = s[head_start:i]
        before = head.rstrip()
        if _init_list_colon(normalize(head)) >= 0 and before and (before[-1].isalnum() or before[-1] in "_>"):
            return self.match(i) + 1, head_start  # a member initialiser: a_{x}
        kind, name = classify(head)
        start = head_start + len(head) - len(head.lstrip())
        while ACCESS.match(s, start):  # 'public:' before the head is not part of it
            start = ACCESS.match(s, start).end()
            start += len(s[start:i]) - len(s[start:i].lstrip())
        if kind == "function":
            end = self.match(i)
            if re.search(r"\btry\s*$", before):
                end = self._catch_handlers(end)
            length = self.line(end) - self.line(start) + 1
            self.functions.append((self.line(start), prefix + name, length))
            return end + 1, end + 1
        if kind == "scope":
            inner = prefix + name + "::" if name else prefix
            end = self.scan(i + 1, inner)
            return end + 1, end + 1
        end = self.match(i)
        return end + 1, end + 1

    def _catch_handlers(self, end):
        """The end of a function-try-block's last catch handler after its body at end."""
        while True:
            m = re.compile(r"\s*catch\s*\(").match(self.s, end + 1)
            if not m:
                return end
            close = _match_close(self.s, m.end() - 1, "(", ")")
            brace = self.s.find("{", close)
            if brace < 0:
                return end
            end = self.match(brace)


def cpp_functions(text):
    scanner = CppScanner(text)
    i = 0
    while i < len(scanner.s):  # a stray '}' at file scope ends scan(); carry on after it
        i = scanner.scan(i) + 1
    return scanner.functions


# ---- Python ----------------------------------------------------------------

def py_functions(text):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return py_functions_by_indent(text)
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((child.lineno, prefix + child.name, child.end_lineno - child.lineno + 1))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def py_functions_by_indent(text):
    """def blocks by indentation, for a file ast cannot parse."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        m = re.match(r"(\s*)(?:async\s+)?def\s+(\w+)", line)
        if not m:
            continue
        indent, last = len(m.group(1)), i
        for j in range(i + 1, len(lines)):
            body = lines[j]
            if body.strip() == "" or body.lstrip().startswith("#"):
                continue
            if len(body) - len(body.lstrip()) <= indent:
                break
            last = j
        found.append((i + 1, m.group(2), last - i + 1))
    return found


# ---- units: a source with its header -----------------------------------------

def unit_offenders(counted, root, limit):
    """One line per .cpp whose lines and its same-named .hpp's exceed limit."""
    out = []
    for path, lines in counted.items():
        header = path[:-len(".cpp")] + ".hpp" if path.endswith(".cpp") else None
        if header is None or header not in counted:
            continue
        total = lines + counted[header]
        if total > limit:
            out.append(f"{os.path.relpath(path, root)} + {os.path.relpath(header, root)}: "
                       f"{total} lines together (unit limit {limit})")
    return out


# ---- driver ----------------------------------------------------------------

def main():
    default_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=default_root, help="repository root (default: %(default)s)")
    parser.add_argument("--max-file", type=int, default=500, help="most lines in a file (default: 500)")
    parser.add_argument("--max-unit", type=int, default=599,
                        help="most lines in a .cpp and its .hpp together (default: 599)")
    parser.add_argument("--max-function", type=int, default=80, help="most lines in a function (default: 80)")
    args = parser.parse_args()

    offenders, n_files, n_functions = [], 0, 0
    counted = {}  # path -> lines, for the units
    for path in source_files(args.root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        rel = os.path.relpath(path, args.root)
        n_files += 1
        lines = line_count(text)
        counted[path] = lines
        if lines > args.max_file:
            offenders.append(f"{rel}: {lines} lines (limit {args.max_file})")
        functions = py_functions(text) if path.endswith(".py") else cpp_functions(text)
        n_functions += len(functions)
        for line, name, length in functions:
            if length > args.max_function:
                offenders.append(f"{rel}:{line}: function {name} is {length} lines (limit {args.max_function})")
    offenders += unit_offenders(counted, args.root, args.max_unit)
    for line in offenders:
        print(line)
    sys.stdout.flush()
    if offenders:
        print(f"check_sizes: {len(offenders)} over the limits ({n_files} files, {n_functions} functions)",
              file=sys.stderr)
        return 1
    print(f"check_sizes: {n_files} files, {n_functions} functions, none over the limits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
