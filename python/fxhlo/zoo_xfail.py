"""The model zoo's expected failures (``python -m fxhlo.zoo``, docs/zoo.md): (model, path) ->
why it fails.  ``python/tests/test_zoo.py`` fails on a failure not listed here AND on a listed
one that passes, so this list only shrinks: remove an entry when its fix lands."""

XFAIL = {
}
