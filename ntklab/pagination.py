"""Cursor pages: one page of a list, and every item after it when iterated.

Every list the service pages answers one wire shape, {object: "list", data: [item, …], has_more,
next} (api_schemas: JobPage, SweepPage, DatasetPage, ModelPage), parsed by `CursorPage`; the next
page is the same request with `after=next`. A sweep's table pages the same way inside the sweep
(`table`, `has_more`, `next`). `Page[T]` holds one page's items and fetches the page after it:

    page = client.jobs.list(limit=50)      # the first page, fetched
    page.items, page.has_next_page()       # this page
    for job in page: ...                   # every job, later pages fetched as the loop reaches them
    for each in page.iter_pages(): ...     # page by page

`AsyncPage[T]` is its twin (`async for`), and an async `list()` returns an `AsyncPaginator[T]`:
`await` it for the first page, or `async for` over it for every item.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


class CursorPage(BaseModel):
    """The wire page every list answers: `data` the items, `next` the cursor of the page after (null on the last)."""

    model_config = ConfigDict(extra="allow")

    object: Literal["list"] = "list"
    data: list[Any]
    has_more: bool = False
    next: str | None = None

    @property
    def cursor(self) -> str | None:
        """The `after` of the following page, None when this is the last."""
        return self.next if self.has_more else None


class LastPageError(LookupError):
    """`next_page()` on the last page."""


class Page(Generic[T]):
    """One page of items, and the way to the next; iterating yields every item of this page and of all after it."""

    def __init__(self, items: list[T], cursor: str | None, fetch: Callable[[str], Page[T]]) -> None:
        self.items = items
        self.cursor = cursor
        self._fetch = fetch

    def has_next_page(self) -> bool:
        return self.cursor is not None

    def next_page(self) -> Page[T]:
        if self.cursor is None:
            raise LastPageError("this is the last page")
        return self._fetch(self.cursor)

    def iter_pages(self) -> Iterator[Page[T]]:
        """This page, then each following page as it is fetched."""
        page = self
        yield page
        while page.has_next_page():
            page = page.next_page()
            yield page

    def __iter__(self) -> Iterator[T]:
        for page in self.iter_pages():
            yield from page.items


class AsyncPage(Generic[T]):
    """`Page`, awaited: `await page.next_page()`, `async for item in page`, `async for p in page.iter_pages()`."""

    def __init__(self, items: list[T], cursor: str | None, fetch: Callable[[str], Awaitable[AsyncPage[T]]]) -> None:
        self.items = items
        self.cursor = cursor
        self._fetch = fetch

    def has_next_page(self) -> bool:
        return self.cursor is not None

    async def next_page(self) -> AsyncPage[T]:
        if self.cursor is None:
            raise LastPageError("this is the last page")
        return await self._fetch(self.cursor)

    async def iter_pages(self) -> AsyncIterator[AsyncPage[T]]:
        page = self
        yield page
        while page.has_next_page():
            page = await page.next_page()
            yield page

    async def __aiter__(self) -> AsyncIterator[T]:
        async for page in self.iter_pages():
            for item in page.items:
                yield item


class AsyncPaginator(Generic[T]):
    """What an async `list()` returns: `await` it for the first `AsyncPage`, `async for` over it for every item."""

    def __init__(self, first: Callable[[], Awaitable[AsyncPage[T]]]) -> None:
        self._first = first

    def __await__(self) -> Generator[Any, None, AsyncPage[T]]:
        return self._first().__await__()

    async def __aiter__(self) -> AsyncIterator[T]:
        async for item in await self._first():
            yield item
