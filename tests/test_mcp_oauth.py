"""Our client on an OAuth-protected MCP server: the SDK's authorization server pieces
(`create_auth_routes` over an in-memory provider) and our `serve_http` with the SDK's bearer
check, on loopback; the client is `mcp.http(url, auth=mcp.oauth(...))`."""

from __future__ import annotations

import functools
import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import httpx2
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    ProviderTokenVerifier,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette

from runtime import FailureKind, ToolCall, open_runtime, tool
from runtime import mcp as rmcp
from runtime.mcp import serve_http

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

SCOPE = "tools"


class MemoryAuthServer:
    """An authorization server that consents at once (the user always says yes)."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.registered = 0
        self.issued = 0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.registered += 1
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        return self._issue(
            authorization_code.client_id, authorization_code.scopes, authorization_code.resource
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(getattr(token, "token", ""), None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        self.issued += 1
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + 3600
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=3600,
            refresh_token=refresh,
            scope=" ".join(scopes),
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def auth_server(provider: MemoryAuthServer) -> AsyncIterator[str]:
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    app = Starlette(
        routes=create_auth_routes(
            cast(Any, provider),
            AnyHttpUrl(issuer),
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE]),
        )
    )
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(hypercorn_serve, cast(Any, app), config, mode="asgi"))
        yield issuer
        nursery.cancel_scope.cancel()


@tool
def whoami() -> str:
    """Say who is served."""
    return "an authorized client"


async def follow_consent(url: str) -> str:
    """The user's browser: open the authorization URL, come back with the redirect."""
    async with httpx2.AsyncClient(follow_redirects=False) as browser:
        response = await browser.get(url)
    assert response.status_code in (302, 303, 307), response.text
    return response.headers["location"]


async def test_our_client_reaches_an_oauth_protected_server() -> None:
    provider = MemoryAuthServer()
    async with auth_server(provider) as issuer, open_runtime([whoami], tracing=False) as server_rt:
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        settings = AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(url),
            required_scopes=[SCOPE],
            validate_token_resource=True,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    serve_http,
                    server_rt,
                    port=port,
                    token_verifier=ProviderTokenVerifier(cast(Any, provider)),
                    auth=settings,
                )
            )
            async with httpx2.AsyncClient() as anonymous:
                refused = await anonymous.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401
            assert "resource_metadata" in refused.headers["www-authenticate"]

            spec = rmcp.http(url, auth=rmcp.oauth(url, authorize=follow_consent), connect_timeout=30)
            async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
                result = await rt.call(ToolCall(id="1", name="whoami"))
            assert result.content == "an authorized client"
            assert provider.registered == 1  # dynamic client registration
            (token,) = provider.access.values()
            assert token.scopes == [SCOPE]  # the scope the server's metadata asks for
            assert token.resource == url  # RFC 8707: the token is for this server only

            # A pre-registered client with its own token storage: no registration, tokens kept.
            provider.clients["known"] = OAuthClientInformationFull(
                client_id="known",
                client_secret="s3cret",
                redirect_uris=["http://127.0.0.1:8765/callback"],  # type: ignore[list-item]
                token_endpoint_auth_method="client_secret_post",
                scope=SCOPE,
            )
            storage = rmcp.MemoryTokenStorage()
            known = rmcp.oauth(
                url,
                authorize=follow_consent,
                client_id="known",
                client_secret="s3cret",
                token_endpoint_auth_method="client_secret_post",
                storage=storage,
            )
            await storage.set_client_info(
                OAuthClientInformationFull(
                    client_id="known",
                    client_secret="s3cret",
                    redirect_uris=["http://127.0.0.1:8765/callback"],  # type: ignore[list-item]
                    token_endpoint_auth_method="client_secret_post",
                )
            )
            spec = rmcp.http(url, auth=known, connect_timeout=30)
            async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
                again = await rt.call(ToolCall(id="2", name="whoami"))
            assert again.ok
            assert provider.registered == 1
            assert storage.tokens is not None
            assert storage.tokens.access_token in provider.access
            nursery.cancel_scope.cancel()


async def test_a_refused_authorization_leaves_the_tools_absent() -> None:
    provider = MemoryAuthServer()
    async with auth_server(provider) as issuer, open_runtime([whoami], tracing=False) as server_rt:
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        settings = AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(url),
            required_scopes=[SCOPE],
            validate_token_resource=True,
        )

        async def user_says_no(authorization_url: str) -> str:
            return "http://127.0.0.1:8765/callback?error=access_denied&error_description=no+thanks"

        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    serve_http,
                    server_rt,
                    port=port,
                    token_verifier=ProviderTokenVerifier(cast(Any, provider)),
                    auth=settings,
                )
            )
            spec = rmcp.http(
                url, auth=rmcp.oauth(url, authorize=user_says_no), connect_timeout=30, prefix="p"
            )
            async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
                result = await rt.call(ToolCall(id="1", name="p_whoami"))
            assert result.kind is FailureKind.UNKNOWN_TOOL
            assert provider.issued == 0
            nursery.cancel_scope.cancel()
