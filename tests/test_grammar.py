"""The GBNF grammar engine (runtime/serve/grammar.h) through its C unit tests.

tests/c/test_grammar.c checks parser errors and their positions, accept and
reject on small grammars (UTF-8, classes, counted repetition, nesting), the
limits that stop pathological grammars (and compile time linear in size),
the token mask (automaton, whole-subtree shortcuts, cache) against the plain
walk and a brute force (every token's bytes fed to a copy of the matcher) on
two synthetic vocabularies along random accepted paths, and JSON Schema to
grammar (accepted and rejected documents, unsupported keywords named).

tests/c/test_json_pattern.c checks the JSON Schema `pattern` keyword compiled
into the grammar: the JSON spelling of strings a pattern matches is accepted
and that of others rejected (quotes, backslashes, control characters,
non-ASCII), minLength / maxLength combined with it, unsupported constructs
and over-limit patterns refused by name, and a randomized cross-check of
thousands of strings against PCRE2.
"""
from conftest import run


def test_grammar_unit(built):
    r = run([built / "tests" / "test_grammar"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " 0 failed" in r.stdout


def test_json_pattern_unit(built):
    r = run([built / "tests" / "test_json_pattern"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " 0 failed" in r.stdout
    assert "agree with pcre2" in r.stdout
