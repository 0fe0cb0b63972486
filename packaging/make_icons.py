"""Render the app icon from its SVG source into PNGs, a Windows .ico and a macOS .icns.

    python packaging/make_icons.py

Reads ``resources/icons/llamadesk.svg`` and writes, next to it, ``llamadesk-<N>.png`` for
N in 16..512, ``llamadesk.ico`` and ``llamadesk.icns`` (both hold PNG images, which every
current Windows and macOS reads). Uses Qt's SVG renderer (PySide6-Essentials ships QtSvg);
no other tool and nothing downloaded. The outputs are committed, so a build does not need
to run this; run it again after editing the SVG.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SVG = ICONS / "llamadesk.svg"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# icns chunk types that hold PNG data, by pixel size
ICNS_TYPES = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"icp6", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic09", 512),
)


def png_path(size: int) -> Path:
    return ICONS / f"llamadesk-{size}.png"


def render_pngs() -> dict[int, bytes]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {SVG}")
    data: dict[int, bytes] = {}
    for size in PNG_SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        raw = QByteArray()
        buffer = QBuffer(raw)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buffer, "PNG")  # type: ignore[call-overload]  # the stub wants bytes; Qt wants str
        buffer.close()
        data[size] = bytes(raw.data())
    del app
    return data


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICO file whose entries are PNG images (Windows Vista and later)."""
    header = struct.pack("<HHH", 0, 1, len(ICO_SIZES))
    offset = len(header) + 16 * len(ICO_SIZES)
    entries, blobs = b"", b""
    for size in ICO_SIZES:
        blob = pngs[size]
        dim = 0 if size >= 256 else size  # 0 means 256
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset)
        blobs += blob
        offset += len(blob)
    return header + entries + blobs


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    chunks = b"".join(
        kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES
    )
    return b"icns" + struct.pack(">I", 8 + len(chunks)) + chunks


def main() -> int:
    pngs = render_pngs()
    for size, blob in pngs.items():
        png_path(size).write_bytes(blob)
    (ICONS / "llamadesk.ico").write_bytes(ico_bytes(pngs))
    (ICONS / "llamadesk.icns").write_bytes(icns_bytes(pngs))
    print(f"wrote {len(pngs)} PNGs, llamadesk.ico and llamadesk.icns to {ICONS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
