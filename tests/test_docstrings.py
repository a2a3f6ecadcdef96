"""Docstrings -> a summary (the first paragraph) and parameter descriptions, in three styles."""

from __future__ import annotations

from runtime.schema import parse_docstring


def test_empty_or_missing_docstring_gives_nothing() -> None:
    for doc in (None, "", "   \n  "):
        parsed = parse_docstring(doc)
        assert parsed.summary == ""
        assert parsed.params == {}


def test_summary_is_the_first_paragraph_joined_into_one_line() -> None:
    doc = """Search the web
    for pages.

    Returns the pages found. This second paragraph is not part of the summary.
    """
    assert parse_docstring(doc).summary == "Search the web for pages."


def test_one_line_docstring_is_the_summary() -> None:
    parsed = parse_docstring("Add two numbers.")
    assert parsed.summary == "Add two numbers."
    assert parsed.params == {}


# -- Google ------------------------------------------------------------------------------


def test_google_args_section() -> None:
    doc = """Search the web.

    Args:
        query: what to look for.
        limit: how many results.

    Returns:
        The pages.
    """
    parsed = parse_docstring(doc)
    assert parsed.summary == "Search the web."
    assert parsed.params == {"query": "what to look for.", "limit": "how many results."}


def test_google_continuation_lines_are_joined() -> None:
    doc = """Search.

    Args:
        query: what to look for,
            continued on a second line
            and a third.
        limit: how many.
    """
    assert parse_docstring(doc).params == {
        "query": "what to look for, continued on a second line and a third.",
        "limit": "how many.",
    }


def test_google_entry_with_a_type_in_parentheses() -> None:
    doc = """Search.

    Args:
        query (str): what to look for.
        limit (int, optional): how many. Defaults to 10.
    """
    assert parse_docstring(doc).params == {
        "query": "what to look for.",
        "limit": "how many. Defaults to 10.",
    }


def test_google_description_starting_on_the_next_line() -> None:
    doc = """Search.

    Args:
        query:
            what to look for.
    """
    assert parse_docstring(doc).params == {"query": "what to look for."}


def test_google_other_sections_do_not_leak_into_parameters() -> None:
    doc = """Search.

    Args:
        query: what to look for.

    Raises:
        ValueError: never.

    Returns:
        pages: the result.
    """
    assert parse_docstring(doc).params == {"query": "what to look for."}


def test_google_arguments_and_keyword_args_headers() -> None:
    doc = """Do it.

    Arguments:
        a: first.

    Keyword Args:
        b: second.
    """
    assert parse_docstring(doc).params == {"a": "first.", "b": "second."}


def test_google_star_parameters_lose_their_stars() -> None:
    doc = """Do it.

    Args:
        *items: the items.
        **options: the options.
    """
    assert parse_docstring(doc).params == {"items": "the items.", "options": "the options."}


# -- NumPy -------------------------------------------------------------------------------


def test_numpy_parameters_section() -> None:
    doc = """Search the web.

    Parameters
    ----------
    query : str
        What to look for,
        over two lines.
    limit : int, optional
        How many.

    Returns
    -------
    list
        The pages.
    """
    parsed = parse_docstring(doc)
    assert parsed.summary == "Search the web."
    assert parsed.params == {"query": "What to look for, over two lines.", "limit": "How many."}


def test_numpy_entry_without_a_type() -> None:
    doc = """Search.

    Parameters
    ----------
    query
        What to look for.
    """
    assert parse_docstring(doc).params == {"query": "What to look for."}


def test_numpy_section_ends_at_the_next_header() -> None:
    doc = """Search.

    Parameters
    ----------
    query : str
        What to look for.

    Raises
    ------
    ValueError
        Never.
    """
    assert parse_docstring(doc).params == {"query": "What to look for."}


# -- Sphinx ------------------------------------------------------------------------------


def test_sphinx_params() -> None:
    doc = """Search the web.

    :param query: what to look for.
    :param limit: how many.
    :returns: the pages.
    """
    parsed = parse_docstring(doc)
    assert parsed.summary == "Search the web."
    assert parsed.params == {"query": "what to look for.", "limit": "how many."}


def test_sphinx_param_with_an_inline_type_and_continuation() -> None:
    doc = """Search.

    :param str query: what to look for,
        continued.
    :type query: str
    :param int limit: how many.
    :raises ValueError: never.
    """
    assert parse_docstring(doc).params == {"query": "what to look for, continued.", "limit": "how many."}


def test_sphinx_summary_stops_at_the_first_field() -> None:
    doc = """Search the web.
    :param query: what to look for.
    """
    parsed = parse_docstring(doc)
    assert parsed.summary == "Search the web."
    assert parsed.params == {"query": "what to look for."}


# -- the whole description (issue 13) -----------------------------------------------------------


def test_description_keeps_every_paragraph_but_the_google_sections() -> None:
    doc = """Search the web
    for pages.

    Results come newest first.

    Note:
        Rate limited to 10 calls a minute.

    Args:
        query: what to look for.

    Returns:
        The pages.

    Raises:
        TimeoutError: when the web is slow.
    """
    parsed = parse_docstring(doc)
    assert parsed.summary == "Search the web for pages."
    assert parsed.description == (
        "Search the web for pages.\n\nResults come newest first.\n\nNote:\n    Rate limited to 10 calls a minute."
    )
    assert parsed.params == {"query": "what to look for."}


def test_description_leaves_out_numpy_sections() -> None:
    doc = """Search.

    Parameters
    ----------
    query : str
        what to look for.

    Returns
    -------
    list
        the pages.

    Examples
    --------
    >>> search("x")
    """
    parsed = parse_docstring(doc)
    assert parsed.params == {"query": "what to look for."}
    assert parsed.description == 'Search.\n\nExamples\n--------\n>>> search("x")'


def test_description_leaves_out_sphinx_fields() -> None:
    doc = """Search.

    Use sparingly.

    :param query: what to look for,
        in words.
    :type query: str
    :returns: the pages.
    :raises ValueError: on an empty query.
    """
    parsed = parse_docstring(doc)
    assert parsed.description == "Search.\n\nUse sparingly."
    assert parsed.params == {"query": "what to look for, in words."}


def test_a_docstring_of_only_sections_has_no_description() -> None:
    for doc in (
        """
        Returns:
            the sum.
        """,
        """Returns: the sum.""",
        """:returns: the sum.""",
        """
        Args:
            a: a number.
        """,
    ):
        assert parse_docstring(doc).description == "", doc
        assert parse_docstring(doc).summary == ""


def test_lists_in_a_description_keep_their_lines() -> None:
    doc = """Pick a mode.

    - fast: fewer checks
    - safe: every check
    """
    assert parse_docstring(doc).description == "Pick a mode.\n\n- fast: fewer checks\n- safe: every check"


def test_attribute_docstrings_are_read_from_the_class_source_base_first() -> None:
    import msgspec

    from runtime.schema._docstring import attribute_docs

    class Base(msgspec.Struct):
        a: int
        """The a."""

    class Child(Base):
        b: str = ""
        """The b,
        on two lines."""
        c: int = 0

    assert attribute_docs(Child) == {"a": "The a.", "b": "The b, on two lines."}
