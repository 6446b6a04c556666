"""The front desk: the page an OAuth client's browser is sent to, where a visitor signs in with
an access code (or as a public visitor) and the owner lets a client in at the owner door. It
implements `oauth.FrontDesk`. Below: `visitor` (opening sessions as `POST /v1/sessions` does),
`oauth`, `access`. Above: `app`.
"""

from .endpoint import DESK_PATH, OWNER_CONSENT_PATH, ConsoleOwner, DeskAddress, FrontDeskEndpoint

__all__ = ["DESK_PATH", "OWNER_CONSENT_PATH", "ConsoleOwner", "DeskAddress", "FrontDeskEndpoint"]
