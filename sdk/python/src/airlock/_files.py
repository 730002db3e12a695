"""Files beyond read and write: list, exists, remove, rename, mkdir, and
upload/download as streams. Each is a step run inside the sandbox, with
its view of the filesystem, never a call on the host's: a symlink that
sandboxed code planted in the workspace is followed (if at all) by the
sandbox, so it reaches only what the sandbox may see, and the record has
every one of them as a labelled step.

The command of each is a fixed script; paths are its arguments (``$1``),
always ``./``-prefixed, never parsed by a shell.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Awaitable, BinaryIO, Callable, Dict, Iterator, List, Optional, Protocol, Union

from . import _protocol, _steps
from ._session import DEFAULT_MAX_FILE, DEFAULT_MAX_OUTPUT, check_file_step
from .errors import AirlockError, OutputLimitError
from .result import RunResult

UPLOAD_CHUNK = 1 << 20
"""Bytes read at a time from a stream given to ``upload``."""

Source = Union[bytes, bytearray, memoryview, str, BinaryIO]
"""What ``upload`` takes: data, or a binary file object read in chunks."""

# Lists PATH's entries down to DEPTH levels: the kind (find's %y), the
# size and the path below PATH, each entry ending in a NUL (a name may hold
# newlines and tabs, never a NUL). -H: a PATH that is a symlink is listed
# as its target, in the sandbox's view; links below it are not followed.
_LIST = r"""[ -d "$1" ] || { echo "$1: not a directory" >&2; exit 2; }
find -H "$1" -mindepth 1 -maxdepth "$2" -printf '%y\t%s\t%P\0'"""
# 0: something is there (a dangling symlink included); 1: nothing is.
_EXISTS = r"""[ -e "$1" ] || [ -L "$1" ]"""

_KINDS = {"f": "file", "d": "dir", "l": "symlink"}


@dataclass(frozen=True)
class EntryInfo:
    """One entry of a directory, as the sandbox sees it."""

    name: str
    path: str
    """Relative to the workspace."""
    type: str
    """``"file"``, ``"dir"``, ``"symlink"`` (not followed) or ``"other"``."""
    size: int


def list_command(path: str, depth: int) -> List[str]:
    if depth < 1:
        raise AirlockError(f"depth {depth}: list at least one level (depth=1)")
    return ["sh", "-c", _LIST, "sh", "./" + directory_path(path), str(depth)]


def parse_list(stdout: bytes, path: str) -> List[EntryInfo]:
    base = directory_path(path)
    entries = []
    for record in stdout.split(b"\0"):
        if not record:
            continue
        kind, size, below = record.decode("utf-8", errors="surrogateescape").split("\t", 2)
        inside = posixpath.normpath(posixpath.join(base, below))
        entries.append(
            EntryInfo(
                name=posixpath.basename(below),
                path=inside,
                type=_KINDS.get(kind, "other"),
                size=int(size),
            )
        )
    return entries


def exists_command(path: str) -> List[str]:
    return ["sh", "-c", _EXISTS, "sh", "./" + _steps.workspace_path(path)]


def remove_command(path: str) -> List[str]:
    # rm removes a symlink itself, never what it points at.
    return ["rm", "-r", "--", "./" + _steps.workspace_path(path)]


def rename_command(old: str, new: str) -> List[str]:
    # -T: `new` is the name to give, never a directory to move into.
    return ["mv", "-T", "--", "./" + _steps.workspace_path(old), "./" + _steps.workspace_path(new)]


def mkdir_command(path: str) -> List[str]:
    return ["mkdir", "-p", "--", "./" + _steps.workspace_path(path)]


def directory_path(path: str) -> str:
    """A directory to list: the workspace itself (``"."``) or one in it."""
    if path in ("", "."):
        return "."
    return _steps.workspace_path(path)


def upload_chunks(source: Source) -> _protocol.Stdin:
    """``source`` as a step's input: bytes as they are, a file object read
    in chunks as the step takes them (never all in memory)."""
    if isinstance(source, str):
        return source.encode()
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    return _read_chunks(source)


def _read_chunks(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        block = stream.read(UPLOAD_CHUNK)
        if not block:
            return
        if not isinstance(block, (bytes, bytearray)):
            raise AirlockError("upload takes a binary file object (opened with 'rb')")
        yield bytes(block)


class Download:
    """Writes a download's stdout to ``dest`` as it arrives and keeps its
    stderr (the reason, should it fail)."""

    def __init__(self, dest: BinaryIO) -> None:
        self._dest = dest
        self.size = 0
        self.stderr = bytearray()

    def __call__(self, kind: int, payload: bytes) -> None:
        if kind == _protocol.STDOUT:
            self._dest.write(payload)
            self.size += len(payload)
        elif len(self.stderr) < 4096:
            self.stderr += payload

    def check(self, path: str, exit_code: int) -> None:
        if exit_code != 0:
            said = self.stderr.decode(errors="replace").strip().splitlines()
            reason = said[-1] if said else f"exit status {exit_code}"
            raise AirlockError(f"download({path!r}) failed: {reason}")


def exists_answer(path: str, exit_code: int, stderr: str) -> bool:
    if exit_code in (0, 1):
        return exit_code == 0
    raise AirlockError(f"exists({path!r}) failed: {stderr.strip() or f'exit status {exit_code}'}")


# The most a listing may print (names and sizes), and a file step's reason.
LIST_MAX = 64 << 20


class StepRunner(Protocol):
    """What the file calls need of a blocking sandbox."""

    def _file_request(self, argv: List[str], label: str) -> Dict[str, Any]: ...

    def _step(
        self,
        request: Dict[str, Any],
        stdin: Optional[_protocol.Stdin],
        max_output: int,
        strict: bool = False,
        on_output: Optional[_protocol.OnOutput] = None,
    ) -> RunResult: ...


class AsyncStepRunner(Protocol):
    """What the file calls need of an asyncio sandbox."""

    def _file_request(self, argv: List[str], label: str) -> Dict[str, Any]: ...

    def _step(
        self,
        request: Dict[str, Any],
        stdin: Optional[_protocol.Stdin],
        max_output: int,
        strict: bool = False,
        on_output: Optional[_protocol.OnOutput] = None,
    ) -> Awaitable[RunResult]: ...


class Files:
    """``sandbox.files``: the workspace's files, each call a step inside the
    sandbox (see the module's doc)."""

    def __init__(self, sandbox: StepRunner) -> None:
        self._sb = sandbox

    def list(self, path: str = ".", *, depth: int = 1, label: str = "sdk:list") -> List[EntryInfo]:
        """The entries of directory ``path`` (relative to the workspace),
        down to ``depth`` levels, as the sandbox sees them: symlinks are
        listed as such, not followed."""
        request = self._sb._file_request(list_command(path, depth), label)
        result = _listed(path, lambda: self._sb._step(request, None, LIST_MAX, strict=True))
        check_file_step("list", path, result)
        return parse_list(result.stdout_bytes, path)

    def exists(self, path: str, *, label: str = "sdk:exists") -> bool:
        """Whether anything is at ``path`` (a dangling symlink counts)."""
        result = self._sb._step(self._sb._file_request(exists_command(path), label), None, DEFAULT_MAX_OUTPUT)
        return exists_answer(path, result.exit_code, result.stderr)

    def remove(self, path: str, *, label: str = "sdk:remove") -> None:
        """Remove a file, a symlink (never what it points at) or a directory
        with everything in it; a missing ``path`` raises :class:`AirlockError`."""
        result = self._sb._step(self._sb._file_request(remove_command(path), label), None, DEFAULT_MAX_OUTPUT)
        check_file_step("remove", path, result)

    def rename(self, old: str, new: str, *, label: str = "sdk:rename") -> None:
        """Rename (move) ``old`` to ``new``, both in the workspace; ``new``
        is the new name, never a directory to move into."""
        result = self._sb._step(
            self._sb._file_request(rename_command(old, new), label), None, DEFAULT_MAX_OUTPUT
        )
        check_file_step("rename", old, result)

    def mkdir(self, path: str, *, label: str = "sdk:mkdir") -> None:
        """Make directory ``path`` and its parents (one already there is fine)."""
        result = self._sb._step(self._sb._file_request(mkdir_command(path), label), None, DEFAULT_MAX_OUTPUT)
        check_file_step("mkdir", path, result)

    def upload(self, path: str, source: Source, *, label: str = "sdk:upload") -> None:
        """Write ``source`` (bytes, text, or a binary file object, read in
        chunks as the sandbox takes them) to ``path``, as ``write_file`` does."""
        request = self._sb._file_request(_steps.write_file_command(path), label)
        check_file_step("upload", path, self._sb._step(request, upload_chunks(source), DEFAULT_MAX_OUTPUT))

    def download(
        self,
        path: str,
        dest: Optional[BinaryIO] = None,
        *,
        max_size: int = DEFAULT_MAX_FILE,
        label: str = "sdk:download",
    ) -> Union[bytes, int]:
        """``path``'s content, read by the sandbox: as bytes (at most
        ``max_size``, as ``read_file``), or, given ``dest`` (a binary file
        object), written to it as it arrives, with no size limit; then the
        number of bytes written."""
        request = self._sb._file_request(_steps.read_file_command(path), label)
        if dest is None:
            try:
                result = self._sb._step(request, None, max_size, strict=True)
            except OutputLimitError:
                raise OutputLimitError(
                    f"download({path!r}): larger than max_size ({max_size} bytes)"
                ) from None
            check_file_step("download", path, result)
            return result.stdout_bytes
        into = Download(dest)
        result = self._sb._step(request, None, 0, on_output=into)
        into.check(path, result.exit_code)
        return into.size


class AsyncFiles:
    """``sandbox.files`` of an :class:`~airlock.AsyncSandbox`; see :class:`Files`."""

    def __init__(self, sandbox: AsyncStepRunner) -> None:
        self._sb = sandbox

    async def list(self, path: str = ".", *, depth: int = 1, label: str = "sdk:list") -> List[EntryInfo]:
        """See :meth:`Files.list`."""
        request = self._sb._file_request(list_command(path, depth), label)
        try:
            result = await self._sb._step(request, None, LIST_MAX, strict=True)
        except OutputLimitError:
            raise OutputLimitError(f"list({path!r}): the listing is over {LIST_MAX} bytes") from None
        check_file_step("list", path, result)
        return parse_list(result.stdout_bytes, path)

    async def exists(self, path: str, *, label: str = "sdk:exists") -> bool:
        """See :meth:`Files.exists`."""
        result = await self._sb._step(
            self._sb._file_request(exists_command(path), label), None, DEFAULT_MAX_OUTPUT
        )
        return exists_answer(path, result.exit_code, result.stderr)

    async def remove(self, path: str, *, label: str = "sdk:remove") -> None:
        """See :meth:`Files.remove`."""
        result = await self._sb._step(
            self._sb._file_request(remove_command(path), label), None, DEFAULT_MAX_OUTPUT
        )
        check_file_step("remove", path, result)

    async def rename(self, old: str, new: str, *, label: str = "sdk:rename") -> None:
        """See :meth:`Files.rename`."""
        request = self._sb._file_request(rename_command(old, new), label)
        check_file_step("rename", old, await self._sb._step(request, None, DEFAULT_MAX_OUTPUT))

    async def mkdir(self, path: str, *, label: str = "sdk:mkdir") -> None:
        """See :meth:`Files.mkdir`."""
        result = await self._sb._step(
            self._sb._file_request(mkdir_command(path), label), None, DEFAULT_MAX_OUTPUT
        )
        check_file_step("mkdir", path, result)

    async def upload(self, path: str, source: Source, *, label: str = "sdk:upload") -> None:
        """See :meth:`Files.upload` (a file object is read on the event loop)."""
        request = self._sb._file_request(_steps.write_file_command(path), label)
        result = await self._sb._step(request, upload_chunks(source), DEFAULT_MAX_OUTPUT)
        check_file_step("upload", path, result)

    async def download(
        self,
        path: str,
        dest: Optional[BinaryIO] = None,
        *,
        max_size: int = DEFAULT_MAX_FILE,
        label: str = "sdk:download",
    ) -> Union[bytes, int]:
        """See :meth:`Files.download`."""
        request = self._sb._file_request(_steps.read_file_command(path), label)
        if dest is None:
            try:
                result = await self._sb._step(request, None, max_size, strict=True)
            except OutputLimitError:
                raise OutputLimitError(
                    f"download({path!r}): larger than max_size ({max_size} bytes)"
                ) from None
            check_file_step("download", path, result)
            return result.stdout_bytes
        into = Download(dest)
        result = await self._sb._step(request, None, 0, on_output=into)
        into.check(path, result.exit_code)
        return into.size


def _listed(path: str, step: Callable[[], RunResult]) -> RunResult:
    try:
        result = step()
    except OutputLimitError:
        raise OutputLimitError(f"list({path!r}): the listing is over {LIST_MAX} bytes") from None
    return result
