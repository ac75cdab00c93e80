"""Reading a file the user named (a dataset or mixture spec, a tokenizer.json): its exact UTF-8 text, or one line."""

from pathlib import Path

from .errors import BuildError


def read_user_file(path: Path, where: str, what: str, missing: str, error: type[BuildError]) -> str:
    """The file's exact text; absent, a folder or unreadable, an `error` whose one line starts with `where` and says
    what to do (`missing` when there is no such file)."""
    try:
        return path.expanduser().read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise error(f"{where}: {missing}") from None
    except IsADirectoryError:
        raise error(f"{where}: a folder, not {what}; name the file itself") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{where}: cannot be read as UTF-8 text ({' '.join(str(exc).split())[:200]})") from None
