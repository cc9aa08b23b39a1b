"""Dependencies of the routes: the app's settings and broker, a database session per request, the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from service.models import ANONYMOUS
from service.settings import Settings
from workers.queue import Broker


def app_settings(request: Request) -> Settings:
    return request.app.state.settings


def session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as opened:
        yield opened


def broker(request: Request) -> Broker:
    return request.app.state.broker


def current_owner() -> str:
    """The owner whose jobs this request may see; every row is ANONYMOUS's until auth lands."""
    return ANONYMOUS


SettingsDep = Annotated[Settings, Depends(app_settings)]
SessionDep = Annotated[Session, Depends(session)]
OwnerDep = Annotated[str, Depends(current_owner)]
BrokerDep = Annotated[Broker, Depends(broker)]
