"""Test helpers: from-scratch evaluation, failure injection and the pyDatalog oracle."""

from __future__ import annotations

from reopt.datalog import Engine


def from_scratch(engine: Engine, functions=None) -> dict[str, set]:
    """Evaluate the engine's program anew on its current inputs; derived relations' rows."""
    fresh = Engine(engine.program, functions, backend=engine.backend)
    for name in engine.program.inputs:
        rows = [row for row, n in engine.counts(name).items() for _ in range(n)]
        if rows:
            fresh.insert(name, rows)
    fresh.run()
    return {name: fresh.rows(name) for name in engine.program.derived}


class InjectedFailure:
    """``Fn_ok(w)``, a check put into a paths program's cost (``checked``) that raises once armed,
    for every weight or only for ``weight``: to fail a run partway and see what it rolls back."""

    def __init__(self, weight=None):
        self.armed = False
        self.weight = weight

    def __call__(self, w):
        if self.armed and self.weight in (None, w):
            raise RuntimeError("injected")
        return True

    @staticmethod
    def checked(text: str) -> str:
        """``text`` (a paths program whose cost is ``c = b + w``) with the check in that rule."""
        return text.replace("c = b + w.", "c = b + w, Fn_ok(w).").replace(
            ".input src", ".function Fn_ok(w) -> ().\n.input src")


def derived_rows(engine: Engine) -> dict[str, set]:
    return {name: engine.rows(name) for name in engine.program.derived}


def pydatalog_answers(facts: dict[str, set], rules: str, query: str) -> set:
    """Ask pyDatalog (an independent engine) for ``query`` over ``facts`` and ``rules``."""
    from pyDatalog import pyDatalog

    pyDatalog.clear()
    lines = [f"+ {name}({', '.join(map(repr, row))})" for name, rows in facts.items() for row in rows]
    pyDatalog.load("\n".join(lines + [rules]))
    try:
        answer = pyDatalog.ask(query)
    except AttributeError:  # pyDatalog raises this when a predicate has no facts at all
        return set()
    finally:
        pyDatalog.clear()
    return set(answer.answers) if answer else set()
