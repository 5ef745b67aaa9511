"""Plan rules: who may manage and who may trigger webhooks.

    free                  no webhooks at all
    pro                   manage with an API key only (a JWT -> plan_upgrade_required);
                          triggers work
    business, enterprise  everywhere

The plan is always the account's *current* plan: a Principal carries the plan read while
authenticating that very request, and a trigger reads the owner's plan with the webhook, so
``nodeloom accounts set --plan`` takes effect on the next request.
"""

from __future__ import annotations

from nodeloom.auth.principal import CredentialKind, Plan, Principal
from nodeloom.errors import PlanUpgradeRequired

_RANK = {Plan.FREE: 0, Plan.PRO: 1, Plan.BUSINESS: 2, Plan.ENTERPRISE: 3}


def at_least(plan: Plan | str, minimum: Plan) -> bool:
    """Whether ``plan`` is ``minimum`` or higher; an unknown plan name ranks lowest."""
    try:
        return _RANK[Plan(plan)] >= _RANK[minimum]
    except ValueError:
        return False


def require_webhook_management(principal: Principal) -> None:
    """Raise PlanUpgradeRequired unless this credential may create, list or change webhooks."""
    if not at_least(principal.plan, Plan.PRO):
        raise PlanUpgradeRequired(
            "Webhooks are not available on the free plan; upgrade to pro or higher."
        )
    if not at_least(principal.plan, Plan.BUSINESS) and principal.via is CredentialKind.JWT:
        raise PlanUpgradeRequired(
            "On the pro plan webhooks are managed through the API with an API key; "
            "the business plan also allows it with an access token."
        )


def require_webhook_trigger(plan: Plan | str) -> None:
    """Raise PlanUpgradeRequired unless the webhook owner's plan allows triggering."""
    if not at_least(plan, Plan.PRO):
        raise PlanUpgradeRequired(
            "The owner of this webhook is on a plan without webhooks (pro or higher needed)."
        )
