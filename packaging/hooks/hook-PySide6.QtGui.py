"""PyInstaller hook for PySide6.QtGui: the stock hook minus the Qt plugins LlamaDesk does not use.

This replaces PyInstaller's own hook (hooks in the spec's ``hookspath`` take precedence).
Dropping a plugin here, before the analysis, also keeps out the libraries only it needs;
filtering the collected binaries afterwards would leave those behind.

Dropped: the VNC platform (needs QtNetwork); EGLFS/KMS, minimal-EGL and Vulkan display
platforms (full-screen embedded devices); the virtual keyboard (QtQuick); the PDF and TIFF
image formats (QtPdf, the system's libtiff); and the GTK3 platform theme, which links the
system's GTK3: bundling GTK's dependencies (cairo, pango, glib ...) from the build machine
next to the user's GTK is a classic cause of crashes. Without it Qt uses the XDG desktop
portal theme (kept) or its own Fusion style. Kept: xcb, wayland, offscreen, minimal and
linuxfb platforms, the input methods (compose, ibus), the other image formats, the SVG
icon engine, the xcb GL integrations and the wayland client plugins.
"""

import re

from PyInstaller.utils.hooks.qt import add_qt6_dependencies

DROPPED_PLUGINS = re.compile(
    r"plugins/(platforms/libq(vnc|eglfs|minimalegl|vkkhrdisplay)\.so"
    r"|platforms/q(vnc|eglfs|minimalegl|vkkhrdisplay)\w*\.dll"
    r"|egldeviceintegrations/"
    r"|platforminputcontexts/(lib)?qtvirtualkeyboardplugin\w*\."
    r"|imageformats/(lib)?q(pdf|tiff)\w*\."
    r"|platformthemes/libqgtk3\.so)"
)


def _kept(entry):
    src, dest_dir = entry
    path = f"{dest_dir}/{src.rsplit('/', 1)[-1]}".replace("\\", "/")
    return DROPPED_PLUGINS.search(path) is None


hiddenimports, binaries, datas = add_qt6_dependencies(__file__)
binaries = [entry for entry in binaries if _kept(entry)]
