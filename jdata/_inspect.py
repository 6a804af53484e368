"""What ``jdata inspect`` and ``jdata inspect-state`` print: a directory of saved elements
(``Dataset.save``, ``cache(filename)``, ``snapshot(path)``) and an iterator's state.

Each ``describe_*`` returns JSON-able data (``--json`` prints it as it is); each
``format_*`` turns it into lines for people. Nothing here imports, calls or unpickles
what it reads: the files may come from anywhere.
"""

from __future__ import annotations

import json
import os
import re

from jdata.io import saved

# A state's lists (shuffle buffers, readers' split lists) print as their length past this.
_LIST_ITEMS = 8
_PROCESS_FILES = "process_*-of-*.json"  # jdata.checkpoint's files in an Orbax item
# A snapshot's entry being written: its pipeline's fingerprint (SHA-256), then the suffix.
_SNAPSHOT_TMP = re.compile(r"[0-9a-f]{64}\.tmp-")


def describe_path(path: str) -> dict:
    """The directory at ``path``: complete (its metadata), a snapshot's root (its
    entries, one per pipeline fingerprint) or a cache still being written, or left
    partial (its temporary directories); else a ``ValueError`` naming what was looked for."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        entry = _entry(path)
        if entry is not None:
            return {"path": path, "kind": "directory", **entry}
        entries = [_entry(os.path.join(path, name)) for name in sorted(os.listdir(path))
                   if os.path.isdir(os.path.join(path, name))]
        entries = [e for e in entries if e is not None]
        partial = _partial(path, inside=True)
        if entries or partial:
            return {"path": path, "kind": "snapshot", "complete": bool(entries),
                    "entries": entries, "partial": partial}
    partial = _partial(path, inside=False)
    if partial:
        return {"path": path, "kind": "cache", "complete": False, "partial": partial}
    what = "a directory" if os.path.isdir(path) else (
        "a file" if os.path.exists(path) else "nothing")
    in_entry = os.path.join(path, "<fingerprint>", saved.METADATA)
    raise ValueError(
        f"{path} is not a jdata dataset directory (there is {what} there): looked for "
        f"{os.path.join(path, saved.METADATA)} (written by Dataset.save and "
        f"cache(filename), read by jdata.load), {in_entry} (snapshot(path)) and "
        f"{path}.tmp-* (a cache being written, or left partial); pass the path given to "
        "save, cache or snapshot")


def _entry(directory: str) -> dict | None:
    """A complete directory's summary, or None where it has no metadata."""
    metadata = saved.read_metadata(directory)  # checked: a ValueError if edited
    if metadata is None:
        return None
    shards = [{"file": s["file"], "records": s["records"],
               "bytes": _size(os.path.join(directory, s["file"]))} for s in metadata["shards"]]
    return {"directory": directory, "complete": True, "element_spec": metadata["element_spec"],
            "elements": metadata["cardinality"], "bytes": metadata.get("bytes"),
            "fingerprint": metadata["fingerprint"], "shards": shards}


def _partial(path: str, inside: bool) -> list[dict]:
    """Writers' temporary directories: ``path.tmp-*`` beside a cache's path, or
    ``<fingerprint>.tmp-*`` inside a snapshot's root."""
    parent, prefix = (path, "") if inside else (os.path.dirname(path),
                                                os.path.basename(path) + ".tmp-")
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    found = []
    for name in names:
        tmp = os.path.join(parent, name)
        if not os.path.isdir(tmp) or not (_SNAPSHOT_TMP.match(name) if inside
                                          else name.startswith(prefix)):
            continue
        files = sorted(os.listdir(tmp))
        found.append({"directory": tmp, "fingerprint": name.split(".tmp-")[0] if inside
                      else None, "files": files,
                      "bytes": sum(_size(os.path.join(tmp, f)) for f in files)})
    return found


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def format_path(info: dict) -> list[str]:
    if info["kind"] == "directory":
        return [f"{info['path']}: complete (written by Dataset.save, cache(filename) or "
                "snapshot(); jdata.load reads it)"] + _entry_lines(info, "  ")
    lines = []
    if info["kind"] == "snapshot":
        lines.append(f"{info['path']}: snapshot root, {len(info['entries'])} complete "
                     f"entries (one per pipeline fingerprint), {len(info['partial'])} partial")
        for entry in info["entries"]:
            lines.append(f"  {os.path.basename(entry['directory'])}: complete")
            lines += _entry_lines(entry, "    ")
    else:
        lines.append(f"{info['path']}: cache not complete (no pass has finished writing it; "
                     "the next complete pass writes it)")
    for tmp in info["partial"]:
        lines.append(f"  partial: {tmp['directory']}: {len(tmp['files'])} files, "
                     f"{_bytes(tmp['bytes'])} so far (a writer running, or one that stopped "
                     "early; never read)")
    return lines


def _entry_lines(entry: dict, indent: str) -> list[str]:
    lines = [f"{indent}element spec: {entry['element_spec']}",
             f"{indent}elements: {entry['elements']:,} ({_bytes(entry['bytes'])} encoded)",
             f"{indent}fingerprint: {entry['fingerprint']}",
             f"{indent}shards: {len(entry['shards'])}"]
    lines += [f"{indent}  {s['file']}: {s['records']:,} records, {_bytes(s['bytes'])}"
              for s in entry["shards"]]
    return lines


def _bytes(n) -> str:
    return "? bytes" if n is None else f"{n:,} bytes"


def describe_state(path: str) -> dict:
    """The iterator state in the JSON file at ``path`` (``DatasetIterator.get_state()``),
    or those of an Orbax checkpoint directory (``jdata.checkpoint``'s files in it)."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        import glob

        files = sorted(glob.glob(os.path.join(path, "**", _PROCESS_FILES), recursive=True))
        if not files:
            raise ValueError(
                f"{path} is a directory without an iterator state: looked for "
                f"{_PROCESS_FILES} in it and below (jdata.checkpoint's files in an Orbax "
                "checkpoint); pass such a directory or a JSON file of get_state()")
        return {"path": path, "kind": "checkpoint",
                "states": [_state_of(f) for f in files]}
    return {"path": path, "kind": "file", "states": [_state_of(path)]}


def _state_of(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; pass a JSON file of "
                         "DatasetIterator.get_state(), or an Orbax checkpoint directory") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path} is not JSON ({str(e)[:200]}); pass a JSON file of "
                         "DatasetIterator.get_state()") from None
    if not isinstance(state, dict) or not {"version", "plan", "state"} <= set(state):
        raise ValueError(f"{path} is JSON but not an iterator state (it has no 'version', "
                         "'plan' and 'state'); pass what DatasetIterator.get_state() returned")
    facts = state.get("facts") if isinstance(state.get("facts"), list) else []
    ops = [{"op": f[0], "cardinality": f[1], "key": f[2]} for f in facts
           if isinstance(f, list) and len(f) == 3]
    return {"file": path, "version": state["version"], "epoch": state.get("epoch", 0),
            "plan": state["plan"], "ops": ops, "positions": _positions(state["state"], "state")}


def _positions(value, where: str) -> list[dict]:
    """One row per nested dict of the state: its fields, nested dicts as their own rows
    and long lists as their length (the state's shape is the plan's: ``input`` nests)."""
    if not isinstance(value, dict):
        return [{"at": where, "fields": {"value": _short(value)}}]
    fields, rows = {}, []
    for name, field in value.items():
        if isinstance(field, dict):
            rows += _positions(field, f"{where}.{name}")
        else:
            fields[name] = _short(field)
    return [{"at": where, "fields": fields}] + rows if fields else rows


def _short(value):
    if isinstance(value, list) and len(value) > _LIST_ITEMS:
        return f"[{len(value)} items]"
    return value


def format_state(info: dict) -> list[str]:
    lines = []
    for state in info["states"]:
        lines += [f"{state['file']}: iterator state version {state['version']}, "
                  f"epoch {state['epoch']}", f"  plan: {state['plan']}"]
        if state["ops"]:
            lines.append("  ops: " + ", ".join(
                f"{o['op']} ({_cardinality(o['cardinality'])})" for o in state["ops"]))
        lines.append("  positions:")
        lines += [f"    {row['at']}: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in
                                                    row["fields"].items())
                  for row in state["positions"]]
    return lines


def _cardinality(n) -> str:
    from jdata._constants import INFINITE, UNKNOWN

    return {INFINITE: "infinite", UNKNOWN: "unknown length"}.get(n, f"{n} elements")


# ------------------------------------------------------------ the commands (jdata.cli)


def add_commands(commands) -> None:
    """``jdata inspect`` and ``jdata inspect-state``, on the parser's subcommands."""
    for name, run, what, text in (
            ("inspect", _inspect_path, "PATH",
             "a directory of saved elements: Dataset.save's (jdata.load reads it), a "
             "cache(filename)'s or a snapshot(path)'s: its element spec, count, shards, "
             "fingerprint, and whether it is complete"),
            ("inspect-state", _inspect_state, "FILE",
             "an iterator state: a JSON file of DatasetIterator.get_state(), or an Orbax "
             "checkpoint directory of jdata.checkpoint: its version, epoch, plan and the "
             "position of each op")):
        command = commands.add_parser(name, help=text.split(":")[0],
                                      description=f"Prints {text}.")
        command.add_argument("path", metavar=what)
        command.add_argument("--json", action="store_true", help="print JSON instead")
        command.set_defaults(run=run, label=lambda args: f"jdata {args.command}")


def _inspect_path(args) -> int:
    return _print(describe_path(args.path), format_path, args.json)


def _inspect_state(args) -> int:
    return _print(describe_state(args.path), format_state, args.json)


def _print(info: dict, lines, as_json: bool) -> int:
    print(json.dumps(info, indent=1) if as_json else "\n".join(lines(info)))
    return 0
