"""OAuth 2.1 for our client on HTTP servers, through the SDK's own `OAuthClientProvider`.

```python
async def authorize(url: str) -> str:
    webbrowser.open(url)                       # the user signs in and consents...
    return await wait_for_the_redirect()       # ...and comes back to the redirect URI

spec = mcp.http(URL, auth=mcp.oauth(URL, authorize=authorize, scopes=["tools"]))
```

What the SDK does on the first 401 (and on a 403 `insufficient_scope`, step-up): protected
resource metadata discovery (RFC 9728, from `WWW-Authenticate` or the well-known URLs),
authorization server metadata (RFC 8414 / OIDC, with the 2025-03-26 fallbacks), the client
(pre-registered `client_id`, a client ID metadata document URL, or dynamic registration),
the authorization code flow with PKCE and the `resource` indicator, token refresh. Tokens and
the client registration live in a `TokenStorage` (the SDK's protocol; `MemoryTokenStorage`
by default): give your own to keep them across runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlparse

from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

__all__ = ["MemoryTokenStorage", "oauth"]

Authorize = Callable[[str], Awaitable[str]]
"""`async def authorize(authorization_url) -> redirect_url`: send the user to the URL; return
the URL the authorization server redirected them back to (with `code` and `state`)."""


class MemoryTokenStorage:
    """The SDK's `TokenStorage` in this process's memory (gone when it exits)."""

    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = client

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def oauth(
    server_url: str,
    *,
    authorize: Authorize,
    redirect_uri: str = "http://127.0.0.1:8765/callback",
    scopes: Sequence[str] | None = None,
    client_name: str = "tool-runtime",
    client_id: str | None = None,
    client_secret: str | None = None,
    token_endpoint_auth_method: str | None = None,
    client_metadata_url: str | None = None,
    storage: TokenStorage | None = None,
) -> OAuthClientProvider:
    """An OAuth 2.1 client for the MCP server at `server_url`; pass it as `mcp.http(url, auth=...)`.

    Args:
        server_url: the MCP endpoint (the protected resource).
        authorize: sends the user to the authorization URL and returns the redirect URL they
            came back to (see `Authorize`).
        redirect_uri: where the authorization server sends the user back.
        scopes: the scopes to ask for (default: what the server's `WWW-Authenticate` or
            metadata says; asked again with more on a 403 `insufficient_scope`).
        client_name: the name registered by dynamic client registration.
        client_id: a pre-registered client (no dynamic registration).
        client_secret: its secret, if it is a confidential client.
        token_endpoint_auth_method: how a pre-registered client authenticates at the token
            endpoint (`client_secret_basic`, `client_secret_post`, `none`; default: basic with a
            secret, none without).
        client_metadata_url: an HTTPS URL of a client ID metadata document, used as the
            client ID when the authorization server supports it.
        storage: where tokens and the client registration are kept (default: memory).
    """
    metadata = OAuthClientMetadata(
        client_name=client_name,
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=" ".join(scopes) if scopes else None,
        token_endpoint_auth_method=None,
    )
    if storage is None:
        pre_registered = None
        if client_id is not None:
            method: Any = token_endpoint_auth_method or ("client_secret_basic" if client_secret else "none")
            pre_registered = OAuthClientInformationFull(
                client_id=client_id,
                client_secret=client_secret,
                redirect_uris=[AnyUrl(redirect_uri)],
                token_endpoint_auth_method=method,
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=metadata.scope,
            )
        storage = MemoryTokenStorage(pre_registered)
    redirected: list[str] = []

    async def redirect_handler(url: str) -> None:
        redirected.append(await authorize(url))

    async def callback_handler() -> AuthorizationCodeResult:
        if not redirected:
            raise RuntimeError("the authorization step returned no redirect URL")
        query = parse_qs(urlparse(redirected.pop()).query)
        if "error" in query:
            detail = query.get("error_description", query["error"])[0]
            raise RuntimeError(f"the authorization server refused: {detail}")
        code = query.get("code")
        if not code:
            raise RuntimeError("the redirect URL carries no authorization code")
        return AuthorizationCodeResult(
            code=code[0],
            state=_first(query, "state"),
            iss=_first(query, "iss"),
        )

    return OAuthClientProvider(
        server_url,
        metadata,
        storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=client_metadata_url,
    )


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None
