"""Tables as the commands print them: drawn by rich on a terminal; on a pipe or in a file (a CI log, ``> cmp.txt``),
the Markdown itself, one line a row, where rich would lay the table out at 80 columns, cutting names short (``r0/
sugar…``) and wrapping cells onto second lines. Every command prints its tables through here."""

from __future__ import annotations

from rich.console import Console


def is_terminal(console: Console) -> bool:
    """Whether the console writes to a terminal (its file's ``isatty``; ``FORCE_COLOR`` does not make a log one)."""
    isatty = getattr(console.file, "isatty", None)
    return bool(isatty and isatty())


def print_markdown(console: Console, text: str) -> None:
    """Markdown (tables, paragraphs): rendered on a terminal, else printed as written, every line whole."""
    if is_terminal(console):
        from rich.markdown import Markdown

        console.print(Markdown(text))
    else:
        console.print(text, markup=False, highlight=False, soft_wrap=True)


def table_markdown(table) -> str:
    """A rich ``Table`` as a Markdown table (its title a line above it; a cell of several lines joined by ``; ``)."""
    def cell(value) -> str:
        return "; ".join(str(value).splitlines()).replace("|", "\\|")

    head = [cell(c.header) for c in table.columns]
    rows = [[cell(v) for v in column.cells] for column in table.columns]
    lines = [str(table.title), ""] if table.title else []
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in zip(*rows)]
    return "\n".join(lines) + "\n"


def print_table(console: Console, table) -> None:
    """A rich ``Table``: drawn on a terminal, else as Markdown (`table_markdown`), every row whole on one line."""
    if is_terminal(console):
        console.print(table)
    else:
        console.print(table_markdown(table), markup=False, highlight=False, soft_wrap=True)
