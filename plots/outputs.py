"""The plots' outputs, written whole: a temporary beside the target, then a
rename, so that a reader never sees half a file and a failure leaves the old
file (or none). common.py re-exports write_text and save_figure."""
from __future__ import annotations

import os
import stat
import tempfile

from common import PlotError


def _check_out(prefix: str) -> str:
    folder = os.path.dirname(os.path.abspath(prefix))
    if not os.path.isdir(folder):
        raise PlotError(f"{prefix}: the output folder {folder} does not exist")
    return folder


def _target(path: str) -> tuple[str, bool]:
    """Where an output really goes, and whether it is written in place: a
    symbolic link is followed (the link stays, its target is replaced); a
    device, FIFO or socket (/dev/null) is written as it is, never replaced by a
    regular file; a folder is refused."""
    real = os.path.realpath(path)
    if os.path.isdir(real):
        raise PlotError(f"{path}: is a folder, not a file to write")
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real, False
    return real, not stat.S_ISREG(mode)


def _atomic(path: str, write) -> None:
    path, in_place = _target(path)
    if in_place:
        write(path)
        return
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text(path: str, text: str) -> None:
    _check_out(path)

    def w(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    _atomic(path, w)


def save_figure(fig, prefix: str) -> list[str]:
    """Writes PREFIX.png and PREFIX.svg: both are drawn into temporaries first
    and renamed only once both exist, so a failure leaves the old pair (or
    none), never a new PNG beside an old SVG."""
    _check_out(prefix)
    targets = [(f"{prefix}.{ext}", *_target(f"{prefix}.{ext}"), ext, opts)
               for ext, opts in (("png", {"dpi": 150}), ("svg", {}))]  # every target checked before any is drawn
    temps = []
    try:
        for _, real, in_place, ext, opts in targets:
            if in_place:
                continue
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(real), prefix="." + os.path.basename(real) + ".",
                                       suffix=".tmp")
            os.close(fd)
            temps.append((tmp, real))
            fig.savefig(tmp, format=ext, bbox_inches="tight", **opts)
            os.chmod(tmp, 0o644)
        for _, real, in_place, ext, opts in targets:
            if in_place:
                fig.savefig(real, format=ext, bbox_inches="tight", **opts)
    except BaseException:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    for tmp, real in temps:
        os.replace(tmp, real)
    return [path for path, *_ in targets]
