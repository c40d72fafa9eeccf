#!/usr/bin/env python3
"""Checks the links of README.md and of every Markdown file under docs/.

    python3 tests/docs/check_links.py REPOSITORY_ROOT

For every inline link or image, [text](target) and ![alt](target), and every
reference definition, [name]: target, whose target is not http(s) or mailto:

  - the file (or folder) exists, relative to the Markdown file that links it
    (a target starting with / is relative to the repository root);
  - where the target has an #anchor (or is only #anchor), the Markdown file it
    names holds a heading whose GitHub slug is that anchor: the heading's text
    lower-cased, every character but letters, digits, spaces, hyphens and
    underscores removed (letters of any script kept), spaces made hyphens; a
    slug met again gets -1, -2, ... (an anchor into a file that is not Markdown
    may only be a line, #L12 or #L12-L20).

Links inside fenced code blocks and inline code spans are not links. Also:
README.md is under 200 lines, none of its paragraphs of prose (outside code
blocks, tables, headings; a list item is one) is longer than 1000 characters
(a history of measurements belongs under docs/, the README links it), and
every Markdown file under docs/ is reached by links from README.md (no
orphans), and every Markdown file under docs/ but outside docs/journal/ (the
reference; the journal is the dated record of measurements) is under 600
lines.

Prints one line per failure, FILE:LINE: broken link TARGET (why), and exits 1;
otherwise prints a one-line summary and exits 0. Standard library only.
"""
import os
import re
import sys
import unicodedata
from urllib.parse import unquote

README_MAX_LINES = 199
README_MAX_PARAGRAPH = 1000  # characters of one paragraph of prose
REFERENCE_MAX_LINES = 599  # a page of docs/ outside docs/journal/
EXTERNAL = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
# [text]( with one level of brackets inside the text, e.g. [![alt](img)](target);
# the text may run over several lines of one paragraph.
LINK_OPEN = re.compile(r"\[(?:[^\[\]\n]|\n(?![ \t]*\n)|\[[^\[\]]*\])*\]\(")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)")
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")
LIST_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s")


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    for folder, dirs, names in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def prose_lines(text, blank_code=True):
    """(line number, line) outside fenced code blocks, inline code blanked."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            continue
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) \
                    and not line.strip()[len(opened.group(1)):].strip():
                fence = None
            continue
        yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line) if blank_code else line


def long_paragraphs(text, limit):
    """(first line, characters) of each paragraph of prose longer than `limit`:
    lines outside code blocks joined up to a blank line, a heading, a table row
    or a list item (which starts a paragraph of its own)."""
    out, start, size, last = [], None, 0, 0

    def close():
        if start is not None and size > limit:
            out.append((start, size))

    for number, line in prose_lines(text, blank_code=False):
        stripped = line.strip()
        not_prose = bool(ATX.match(line)) or stripped.startswith("|")
        if number != last + 1 or not stripped or not_prose or LIST_ITEM.match(line):
            close()
            start, size = None, 0
        last = number
        if stripped and not not_prose:
            if start is None:
                start = number
            size += len(stripped) + (1 if size else 0)
    close()
    return out


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    kept = "".join(c for c in text.lower()
                   if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return kept.replace(" ", "-")


_ANCHORS = {}


def anchors(path):
    """The GitHub slugs of every heading of a Markdown file."""
    if path in _ANCHORS:
        return _ANCHORS[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    headings, previous = [], ""
    for _, line in prose_lines(text, blank_code=False):
        atx, setext = ATX.match(line), SETEXT.match(line)
        if atx:
            headings.append(atx.group(2) or "")
        elif setext and previous.strip() and not ATX.match(previous):
            headings.append(previous.strip())
        previous = "" if atx else line
    seen, slugs = {}, set()
    for heading in headings:
        base = slug(heading.strip())
        count = seen.get(base, 0)
        seen[base] = count + 1
        slugs.add(base if count == 0 else f"{base}-{count}")
    _ANCHORS[path] = slugs
    return slugs


def link_target(text, start):
    """The target of the link whose '(' is just before start, or None."""
    i = start
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "<":
        end = text.find(">", i)
        return None if end < 0 else text[i + 1:end]
    depth, j = 0, i
    while j < len(text) and not text[j].isspace():
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            if depth == 0:
                break
            depth -= 1
        j += 1
    return text[i:j]


def links(text):
    """(line number, target) of every link, image and reference definition."""
    lines = [""] * (text.count("\n") + 1)
    for number, line in prose_lines(text):
        lines[number - 1] = line
        ref = REFERENCE.match(line)
        if ref:
            yield number, ref.group(1).strip("<>")
    prose = "\n".join(lines)
    for m in LINK_OPEN.finditer(prose):
        target = link_target(prose, m.end())
        if target is not None:
            yield prose.count("\n", 0, m.end()) + 1, target


def check_target(root, source, target):
    """(resolved path or None, why it is broken or None)."""
    path, _, anchor = target.partition("#")
    path = unquote(path)
    if not path:
        resolved = source
    elif path.startswith("/"):
        resolved = os.path.normpath(os.path.join(root, path.lstrip("/")))
    else:
        resolved = os.path.normpath(os.path.join(os.path.dirname(source), path))
    if os.path.commonpath([resolved, root]) != root:
        return None, "outside the repository"
    if not os.path.exists(resolved):
        return None, "no such file"
    if "#" not in target:
        return resolved, None
    anchor = unquote(anchor)
    if not resolved.endswith(".md"):
        if LINE_ANCHOR.match(anchor):
            return resolved, None
        return resolved, f"anchor #{anchor} into a file that is not Markdown"
    if os.path.isdir(resolved) or anchor not in anchors(resolved):
        return resolved, f"no heading in {os.path.relpath(resolved, root)} with the slug {anchor}"
    return resolved, None


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    files = markdown_files(root)
    readme = os.path.join(root, "README.md")
    failures, linked, count, anchored, readme_lines = [], {}, 0, 0, 0
    if readme not in files:
        failures.append("README.md:1: no README.md at the repository root")
    for source in files:
        with open(source, encoding="utf-8") as f:
            text = f.read()
        rel = os.path.relpath(source, root)
        for number, target in sorted(links(text)):
            if not target or EXTERNAL.match(target):
                continue
            count += 1
            anchored += "#" in target
            resolved, why = check_target(root, source, target)
            if why:
                failures.append(f"{rel}:{number}: broken link {target} ({why})")
            if resolved and resolved != source:
                linked.setdefault(source, set()).add(resolved)
        rel_parts = rel.split(os.sep)
        if rel_parts[0] == "docs" and rel_parts[1:2] != ["journal"]:
            lines = len(text.splitlines())
            if lines > REFERENCE_MAX_LINES:
                failures.append(f"{rel}:{lines}: {lines} lines (limit: under {REFERENCE_MAX_LINES + 1} for a "
                                f"reference page; split it, or move dated measurements to docs/journal/)")
        if source == readme:
            readme_lines = len(text.splitlines())
            if readme_lines > README_MAX_LINES:
                failures.append(f"README.md:{readme_lines}: {readme_lines} lines "
                                f"(limit: under {README_MAX_LINES + 1})")
            for number, size in long_paragraphs(text, README_MAX_PARAGRAPH):
                failures.append(f"README.md:{number}: a paragraph of {size} characters (limit: "
                                f"{README_MAX_PARAGRAPH}; the rest belongs under docs/)")
    reached, todo = set(), [readme]
    while todo:
        page = todo.pop()
        if page not in reached:
            reached.add(page)
            todo += sorted(linked.get(page, ()))
    for orphan in (f for f in files if f not in reached):
        failures.append(f"{os.path.relpath(orphan, root)}:1: not reached by links from README.md (orphan)")
    for failure in failures:
        print(failure)
    if failures:
        print(f"check_links: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print(f"check_links: {count} links ({anchored} with an anchor) in {len(files)} Markdown files, "
          f"all resolve; README.md {readme_lines} lines; no orphan under docs/; every reference page "
          f"under {REFERENCE_MAX_LINES + 1} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
