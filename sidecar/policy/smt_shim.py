"""`memgov-cvc5`: an interactive SMT-LIB solver on stdin/stdout over the cvc5 Python bindings.

The PyPI ``cvc5`` wheel ships the library and bindings but no executable; the symbolic checks of
``memgov policy prove`` talk to one (``cvc5 --lang smt --tlimit=N``), one command at a time. This
reads stdin, cuts it into complete top-level S-expressions and runs each as it arrives, so an
answer is printed as soon as its ``(check-sat)`` or ``(get-model)`` is read.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

_USAGE = "usage: memgov-cvc5 [--lang smt] [--tlimit=MS]"


def commands(chunks: Iterator[str]) -> Iterator[str]:
    """Complete top-level S-expressions of a stream of text, comments dropped."""
    buf: list[str] = []
    depth = 0
    in_string = in_quoted = in_comment = False
    for chunk in chunks:
        for ch in chunk:
            if in_comment:
                in_comment = ch != "\n"
                continue
            if in_string:
                buf.append(ch)
                in_string = ch != '"'
                continue
            if in_quoted:
                buf.append(ch)
                in_quoted = ch != "|"
                continue
            if ch == ";":
                in_comment = True
                continue
            if depth == 0 and ch != "(":
                continue
            buf.append(ch)
            if ch == '"':
                in_string = True
            elif ch == "|":
                in_quoted = True
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    yield "".join(buf)
                    buf.clear()


def _time_limit(argv: list[str]) -> str | None:
    limit = None
    for arg in argv:
        if arg.startswith("--tlimit="):
            limit = arg.split("=", 1)[1]
        elif arg not in ("--lang", "smt", "--lang=smt"):
            raise SystemExit(f"{_USAGE}\nmemgov-cvc5: unknown argument {arg!r}")
    return limit


def main(argv: list[str] | None = None) -> int:
    """Run SMT-LIB commands from stdin until it closes or ``(exit)``."""
    limit = _time_limit(sys.argv[1:] if argv is None else argv)
    try:
        import cvc5
    except ImportError:
        print("memgov-cvc5: the cvc5 Python package is not installed (pip install 'memgov[prove]')", file=sys.stderr)
        return 2

    def fresh() -> tuple[Any, Any]:
        solver = cvc5.Solver()
        if limit is not None:
            # The executable's --tlimit bounds its whole run; here each check-sat gets the limit.
            solver.setOption("tlimit-per", limit)
        return solver, cvc5.SymbolManager(solver.getTermManager())

    solver, symbols = fresh()
    for text in commands(iter(sys.stdin.readline, "")):
        if text.split() == ["(reset)"]:
            # Every check starts with (reset): a new solver and symbol table, as the executable does.
            solver, symbols = fresh()
            continue
        # One parser per command; the shared symbol manager keeps the declarations between them.
        parser = cvc5.InputParser(solver, symbols)
        parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, "stdin")
        while True:
            try:
                cmd = parser.nextCommand()
            except RuntimeError as e:
                # cvc5 quits on a parse error; the caller reads this shape and stops.
                message = str(e).replace('"', "'").replace("\n", " ")
                print(f'(error "Parse Error: {message}")', flush=True)
                return 1
            if cmd.isNull():
                break
            if cmd.getCommandName() == "exit":
                return 0
            out = cmd.invoke(solver, symbols)
            if out:
                sys.stdout.write(out if out.endswith("\n") else out + "\n")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
