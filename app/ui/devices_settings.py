"""The window's device choices: ``devices.json`` in the data folder (Qt-free).

The schema's device fields (:data:`app.settings_schema.DEVICE_FIELDS`: GPU layers, split,
devices, remote workers) plus whether the user said the network to the remote workers is
trusted (without it only loopback endpoints are kept: the RPC protocol has no password and
no encryption). The window passes :meth:`DeviceSettings.model_settings` to every load.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from app import paths
from app.engine.settings import ModelSettings, SettingsError
from app.fsutil import atomic_write_bytes
from app.settings_schema import DEVICE_FIELDS

log = logging.getLogger(__name__)

FILE_NAME = "devices.json"


def _default(name: str) -> Any:
    return DEVICE_FIELDS[name].default


@dataclass(frozen=True)
class DeviceSettings:
    gpu_layers: str = _default("gpu_layers")
    split_mode: str = _default("split_mode")
    main_device: int = _default("main_device")
    tensor_split: str = _default("tensor_split")
    devices: str = _default("devices")
    rpc_servers: str = _default("rpc_servers")
    trusted_network: bool = False  # the user ticked "this network is trusted"

    def model_settings(self) -> ModelSettings:
        """What a load is given (validated: a bad value is said, and the default used)."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name in DEVICE_FIELDS}
        settings = ModelSettings(**values)
        try:
            settings.validate()
        except SettingsError as exc:
            log.warning("device settings ignored: %s", exc)
            return ModelSettings()
        return settings

    def with_endpoints(self, endpoints: tuple[str, ...]) -> DeviceSettings:
        return replace(self, rpc_servers=",".join(endpoints))


def settings_file() -> Path:
    return paths.data_dir() / FILE_NAME


def load_device_settings(path: Path | None = None) -> DeviceSettings:
    """The saved choices; defaults for a missing or damaged file (logged, not raised)."""
    path = path or settings_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return DeviceSettings()
    except (OSError, ValueError) as exc:
        log.warning("%s could not be read (%s): the default device settings are used", path, exc)
        return DeviceSettings()
    known = {f.name: f.type for f in fields(DeviceSettings)}
    kept = {k: v for k, v in data.items() if k in known} if isinstance(data, dict) else {}
    try:
        return DeviceSettings(**kept)
    except TypeError:
        return DeviceSettings()


def save_device_settings(settings: DeviceSettings, path: Path | None = None) -> None:
    path = path or settings_file()
    atomic_write_bytes(path, json.dumps(asdict(settings), indent=1).encode("utf-8"))
