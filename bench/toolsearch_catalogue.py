"""Make bench/toolsearch_catalogue.json: the tool catalogue bench/toolsearch.py searches.

Real definitions first: the reference servers' (`.cache/ecosystem/plugins`: everything,
filesystem, memory, time — scripts/install-ecosystem installs them) and the builtins'
(`capabilities/*`), each server started over stdio and asked `tools/list` with the SDK client;
the connectors' own verbs (`connected`, `can_perform`) are left out, as a visitor never sees
them. Then generated definitions that widen it to more than 500, the kind an owner with a dozen
SaaS plugins has: services × things × verbs, each with a description and parameters written
as such servers write them, name styles mixed (snake_case, camelCase, kebab-case).

Run once (`.venv/bin/python bench/toolsearch_catalogue.py`); the JSON is committed so the
benchmark needs neither Node nor the ecosystem. Deterministic: the same servers give the same file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
ECO = ROOT / ".cache" / "ecosystem" / "plugins"
OUT = Path(__file__).resolve().parent / "toolsearch_catalogue.json"
_CONNECTOR_VERBS = {"connected", "can_perform"}


def _servers() -> dict[str, tuple[list[str], Path, dict[str, str]]]:
    modules = "node_modules/@modelcontextprotocol"
    servers = {
        "everything": (["node", f"{modules}/server-everything/dist/index.js", "stdio"], ECO / "everything", {}),
        "filesystem": (["node", f"{modules}/server-filesystem/dist/index.js", "files"], ECO / "filesystem", {}),
        "memory": (
            ["node", f"{modules}/server-memory/dist/index.js"],
            ECO / "memory",
            {"MEMORY_FILE_PATH": os.devnull},
        ),
        "time": (["venv/bin/python", "-m", "mcp_server_time", "--local-timezone", "UTC"], ECO / "time", {}),
    }
    for folder in sorted((ROOT / "capabilities").iterdir()):
        if (folder / "server.py").exists():
            servers[f"builtin:{folder.name}"] = ([sys.executable, "server.py"], folder, {"PYTHONPATH": str(ROOT)})
    return servers


async def real_tools() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for source, (argv, cwd, env) in _servers().items():
        command = str(cwd / argv[0]) if argv[0].startswith("venv/") else argv[0]
        params = StdioServerParameters(command=command, args=argv[1:], cwd=str(cwd), env={**os.environ, **env})
        with anyio.fail_after(60):
            async with Client(stdio_client(params), mode="legacy") as client:  # their banners go to stderr
                tools = (await client.list_tools()).tools
        found.extend(
            {"source": source, **tool.model_dump(mode="json", by_alias=True, exclude_none=True)}
            for tool in tools
            if tool.name not in _CONNECTOR_VERBS
        )
        print(f"{source}: {len(tools)} tools", file=sys.stderr)  # noqa: T201 - a bench script says what it did
    return found


# -- generated: services × things × verbs ------------------------------------------------------

# service key: (display name, name style, {thing: (singular words, plural words, {field: description})})
SERVICES: dict[str, tuple[str, str, dict[str, tuple[str, str, dict[str, str]]]]] = {
    "github": (
        "GitHub",
        "snake",
        {
            "issue": (
                "issue",
                "issues",
                {
                    "repo": "Repository as owner/name",
                    "title": "Issue title",
                    "body": "Issue text in Markdown",
                    "labels": "Label names",
                },
            ),
            "pull_request": (
                "pull request",
                "pull requests",
                {
                    "repo": "Repository as owner/name",
                    "head": "Branch with the changes",
                    "base": "Branch to merge into",
                    "title": "Title",
                },
            ),
            "release": (
                "release",
                "releases",
                {"repo": "Repository as owner/name", "tag": "Git tag of the release", "notes": "Release notes"},
            ),
            "workflow_run": (
                "workflow run",
                "workflow runs",
                {
                    "repo": "Repository as owner/name",
                    "workflow": "Workflow file name",
                    "branch": "Branch the run is for",
                },
            ),
        },
    ),
    "gitlab": (
        "GitLab",
        "snake",
        {
            "merge_request": (
                "merge request",
                "merge requests",
                {
                    "project": "Project path",
                    "source_branch": "Branch with the changes",
                    "target_branch": "Branch to merge into",
                },
            ),
            "pipeline": ("CI pipeline", "CI pipelines", {"project": "Project path", "ref": "Branch or tag to run on"}),
        },
    ),
    "jira": (
        "Jira",
        "camel",
        {
            "issue": (
                "issue",
                "issues",
                {
                    "projectKey": "Project key such as OPS",
                    "summary": "One-line summary",
                    "issueType": "Bug, Task or Story",
                    "priority": "Priority name",
                },
            ),
            "sprint": (
                "sprint",
                "sprints",
                {"boardId": "Agile board id", "name": "Sprint name", "goal": "Sprint goal"},
            ),
            "comment": (
                "issue comment",
                "issue comments",
                {"issueKey": "Issue key such as OPS-12", "body": "Comment text"},
            ),
        },
    ),
    "linear": (
        "Linear",
        "snake",
        {
            "issue": ("issue", "issues", {"team": "Team key", "title": "Issue title", "estimate": "Story points"}),
            "cycle": ("cycle", "cycles", {"team": "Team key", "starts_at": "First day", "ends_at": "Last day"}),
        },
    ),
    "slack": (
        "Slack",
        "snake",
        {
            "message": (
                "message",
                "messages",
                {"channel": "Channel id or #name", "text": "Message text (mrkdwn)", "thread_ts": "Thread to reply in"},
            ),
            "channel": (
                "channel",
                "channels",
                {"name": "Channel name", "is_private": "Whether it is private", "topic": "Channel topic"},
            ),
            "reminder": (
                "reminder",
                "reminders",
                {"text": "What to be reminded of", "time": "When, as a timestamp or natural language"},
            ),
            "reaction": (
                "emoji reaction",
                "emoji reactions",
                {"channel": "Channel id", "timestamp": "Message timestamp", "emoji": "Emoji name"},
            ),
        },
    ),
    "discord": (
        "Discord",
        "snake",
        {
            "message": ("message", "messages", {"channel_id": "Channel id", "content": "Message content"}),
            "role": (
                "server role",
                "server roles",
                {"guild_id": "Server (guild) id", "name": "Role name", "color": "Role colour"},
            ),
        },
    ),
    "outlook": (
        "Outlook",
        "camel",
        {
            "mail": (
                "email",
                "emails",
                {
                    "to": "Recipient addresses",
                    "subject": "Subject line",
                    "body": "Message body",
                    "cc": "Copy recipients",
                },
            ),
            "draft": (
                "email draft",
                "email drafts",
                {"to": "Recipient addresses", "subject": "Subject line", "body": "Message body"},
            ),
            "folder": (
                "mail folder",
                "mail folders",
                {"displayName": "Folder name", "parentFolderId": "Folder it sits in"},
            ),
        },
    ),
    "gcal": (
        "Google Calendar",
        "snake",
        {
            "event": (
                "calendar event",
                "calendar events",
                {
                    "calendar_id": "Calendar id",
                    "summary": "Event title",
                    "start": "Start date-time",
                    "end": "End date-time",
                    "attendees": "Guest email addresses",
                },
            ),
            "calendar": ("calendar", "calendars", {"summary": "Calendar name", "time_zone": "IANA time zone"}),
        },
    ),
    "notion": (
        "Notion",
        "camel",
        {
            "page": (
                "page",
                "pages",
                {
                    "parentId": "Parent page or database id",
                    "title": "Page title",
                    "content": "Page content as Markdown",
                },
            ),
            "database": (
                "database",
                "databases",
                {"parentId": "Parent page id", "title": "Database title", "properties": "Column definitions"},
            ),
        },
    ),
    "confluence": (
        "Confluence",
        "snake",
        {
            "page": (
                "wiki page",
                "wiki pages",
                {"space_key": "Space key", "title": "Page title", "body": "Page body in storage format"},
            ),
            "space": ("space", "spaces", {"key": "Space key", "name": "Space name"}),
        },
    ),
    "gdrive": (
        "Google Drive",
        "snake",
        {
            "file": ("file", "files", {"name": "File name", "mime_type": "MIME type", "parent_id": "Folder id"}),
            "permission": (
                "sharing permission",
                "sharing permissions",
                {"file_id": "File id", "email": "Who to share with", "role": "reader, commenter or writer"},
            ),
        },
    ),
    "dropbox": (
        "Dropbox",
        "kebab",
        {
            "file": ("file", "files", {"path": "Path in Dropbox", "mode": "add or overwrite"}),
            "shared_link": ("shared link", "shared links", {"path": "Path to share", "expires": "Expiry date"}),
        },
    ),
    "s3": (
        "Amazon S3",
        "snake",
        {
            "bucket": ("bucket", "buckets", {"bucket": "Bucket name", "region": "AWS region"}),
            "object": (
                "object",
                "objects",
                {"bucket": "Bucket name", "key": "Object key", "content_type": "Content type"},
            ),
        },
    ),
    "postgres": (
        "PostgreSQL",
        "snake",
        {
            "table": (
                "table",
                "tables",
                {"schema": "Schema name", "table": "Table name", "columns": "Column definitions"},
            ),
            "index": (
                "index",
                "indexes",
                {"table": "Table name", "columns": "Indexed columns", "unique": "Whether it is unique"},
            ),
        },
    ),
    "stripe": (
        "Stripe",
        "snake",
        {
            "customer": (
                "customer",
                "customers",
                {"email": "Customer email", "name": "Full name", "metadata": "Key-value metadata"},
            ),
            "invoice": (
                "invoice",
                "invoices",
                {"customer": "Customer id", "due_date": "When payment is due", "items": "Line items"},
            ),
            "refund": (
                "refund",
                "refunds",
                {
                    "payment_intent": "Payment to refund",
                    "amount": "Amount in cents",
                    "reason": "duplicate, fraudulent or requested_by_customer",
                },
            ),
            "subscription": (
                "subscription",
                "subscriptions",
                {"customer": "Customer id", "price": "Price id", "trial_days": "Trial length in days"},
            ),
        },
    ),
    "shopify": (
        "Shopify",
        "camel",
        {
            "product": (
                "product",
                "products",
                {"title": "Product title", "vendor": "Vendor", "price": "Price", "sku": "Stock keeping unit"},
            ),
            "order": (
                "order",
                "orders",
                {"customerId": "Customer id", "lineItems": "Items ordered", "shippingAddress": "Where to ship"},
            ),
            "inventory": (
                "inventory level",
                "inventory levels",
                {"sku": "Stock keeping unit", "locationId": "Warehouse location", "available": "Units in stock"},
            ),
        },
    ),
    "hubspot": (
        "HubSpot",
        "snake",
        {
            "contact": (
                "CRM contact",
                "CRM contacts",
                {
                    "email": "Email address",
                    "firstname": "First name",
                    "lastname": "Last name",
                    "company": "Company name",
                },
            ),
            "deal": ("deal", "deals", {"dealname": "Deal name", "amount": "Deal value", "dealstage": "Pipeline stage"}),
        },
    ),
    "salesforce": (
        "Salesforce",
        "camel",
        {
            "lead": (
                "sales lead",
                "sales leads",
                {"company": "Company", "lastName": "Last name", "status": "Lead status"},
            ),
            "opportunity": (
                "opportunity",
                "opportunities",
                {
                    "accountId": "Account id",
                    "stageName": "Stage",
                    "closeDate": "Expected close date",
                    "amount": "Amount",
                },
            ),
        },
    ),
    "zendesk": (
        "Zendesk",
        "snake",
        {
            "ticket": (
                "support ticket",
                "support tickets",
                {
                    "subject": "Ticket subject",
                    "description": "What the customer wrote",
                    "priority": "low, normal, high or urgent",
                    "requester_email": "Customer email",
                },
            ),
            "macro": ("macro", "macros", {"title": "Macro title", "actions": "What it does to a ticket"}),
        },
    ),
    "twilio": (
        "Twilio",
        "snake",
        {
            "sms": (
                "text message (SMS)",
                "text messages (SMS)",
                {"to": "Phone number in E.164", "body": "Message text", "from_number": "Sending number"},
            ),
            "call": (
                "phone call",
                "phone calls",
                {"to": "Phone number in E.164", "twiml": "What the call says or does"},
            ),
        },
    ),
    "k8s": (
        "Kubernetes",
        "kebab",
        {
            "pod": ("pod", "pods", {"namespace": "Namespace", "name": "Pod name", "container": "Container name"}),
            "deployment": (
                "deployment",
                "deployments",
                {
                    "namespace": "Namespace",
                    "name": "Deployment name",
                    "replicas": "Number of replicas",
                    "image": "Container image",
                },
            ),
            "config_map": (
                "config map",
                "config maps",
                {"namespace": "Namespace", "name": "Name", "data": "Key-value data"},
            ),
        },
    ),
    "docker": (
        "Docker",
        "snake",
        {
            "container": (
                "container",
                "containers",
                {
                    "image": "Image to run",
                    "name": "Container name",
                    "ports": "Port mappings",
                    "env": "Environment variables",
                },
            ),
            "image": ("image", "images", {"repository": "Image repository", "tag": "Image tag"}),
        },
    ),
    "sentry": (
        "Sentry",
        "snake",
        {
            "issue": (
                "error issue",
                "error issues",
                {"project": "Project slug", "status": "resolved, unresolved or ignored", "query": "Search terms"},
            ),
            "alert_rule": (
                "alert rule",
                "alert rules",
                {"project": "Project slug", "conditions": "When it fires", "actions": "Who is told"},
            ),
        },
    ),
    "datadog": (
        "Datadog",
        "camel",
        {
            "monitor": (
                "monitor",
                "monitors",
                {"query": "Metric query", "threshold": "Alert threshold", "message": "Notification text"},
            ),
            "dashboard": ("dashboard", "dashboards", {"title": "Dashboard title", "widgets": "Widget definitions"}),
        },
    ),
    "pagerduty": (
        "PagerDuty",
        "snake",
        {
            "incident": (
                "incident",
                "incidents",
                {"service_id": "Affected service", "title": "What is wrong", "urgency": "high or low"},
            ),
            "schedule": (
                "on-call schedule",
                "on-call schedules",
                {"name": "Schedule name", "time_zone": "Time zone", "users": "Who rotates"},
            ),
        },
    ),
    "trello": (
        "Trello",
        "camel",
        {
            "card": (
                "card",
                "cards",
                {"listId": "List the card is on", "name": "Card title", "due": "Due date", "desc": "Card description"},
            ),
            "board": ("board", "boards", {"name": "Board name", "prefs": "Board preferences"}),
        },
    ),
    "asana": (
        "Asana",
        "snake",
        {
            "task": (
                "task",
                "tasks",
                {"workspace": "Workspace id", "name": "Task name", "assignee": "Who does it", "due_on": "Due date"},
            ),
            "project": (
                "project",
                "projects",
                {"workspace": "Workspace id", "name": "Project name", "team": "Team id"},
            ),
        },
    ),
    "airtable": (
        "Airtable",
        "camel",
        {
            "record": ("record", "records", {"baseId": "Base id", "tableName": "Table name", "fields": "Field values"}),
        },
    ),
    "spotify": (
        "Spotify",
        "snake",
        {
            "playlist": (
                "playlist",
                "playlists",
                {"name": "Playlist name", "public": "Whether others can see it", "tracks": "Track URIs"},
            ),
            "track": ("track", "tracks", {"uri": "Track URI", "market": "Country code"}),
        },
    ),
    "youtube": (
        "YouTube",
        "camel",
        {
            "video": (
                "video",
                "videos",
                {
                    "title": "Video title",
                    "description": "Video description",
                    "privacyStatus": "public, unlisted or private",
                },
            ),
            "comment": ("video comment", "video comments", {"videoId": "Video id", "text": "Comment text"}),
        },
    ),
    "xposts": (
        "X (Twitter)",
        "snake",
        {
            "post": (
                "post (tweet)",
                "posts (tweets)",
                {
                    "text": "Post text, at most 280 characters",
                    "reply_to": "Post to reply to",
                    "media_ids": "Attached media",
                },
            ),
        },
    ),
    "figma": (
        "Figma",
        "camel",
        {
            "comment": (
                "design comment",
                "design comments",
                {"fileKey": "Figma file key", "message": "Comment text", "nodeId": "Frame or layer it is on"},
            ),
        },
    ),
    "mailchimp": (
        "Mailchimp",
        "snake",
        {
            "campaign": (
                "email campaign",
                "email campaigns",
                {"list_id": "Audience id", "subject_line": "Subject line", "from_name": "Sender name"},
            ),
            "member": (
                "audience member",
                "audience members",
                {"list_id": "Audience id", "email_address": "Subscriber email", "status": "subscribed or unsubscribed"},
            ),
        },
    ),
    "quickbooks": (
        "QuickBooks",
        "camel",
        {
            "expense": (
                "expense",
                "expenses",
                {"accountRef": "Expense account", "amount": "Amount", "vendorRef": "Vendor", "txnDate": "Date"},
            ),
            "bill": (
                "vendor bill",
                "vendor bills",
                {"vendorRef": "Vendor", "dueDate": "Due date", "lines": "Bill lines"},
            ),
        },
    ),
    "openweather": (
        "OpenWeather",
        "snake",
        {
            "forecast": (
                "weather forecast",
                "weather forecasts",
                {"city": "City name", "days": "How many days ahead", "units": "metric or imperial"},
            ),
        },
    ),
    "maps": (
        "Google Maps",
        "snake",
        {
            "route": (
                "driving route",
                "driving routes",
                {
                    "origin": "Start address",
                    "destination": "End address",
                    "mode": "driving, walking, bicycling or transit",
                },
            ),
            "place": (
                "place",
                "places",
                {"query": "What to look for", "location": "Near which point", "radius": "Search radius in meters"},
            ),
        },
    ),
    "okta": (
        "Okta",
        "camel",
        {
            "user": (
                "user account",
                "user accounts",
                {
                    "login": "Login email",
                    "firstName": "First name",
                    "lastName": "Last name",
                    "groupIds": "Groups to join",
                },
            ),
            "group": ("group", "groups", {"name": "Group name", "description": "What it is for"}),
        },
    ),
    "vercel": (
        "Vercel",
        "kebab",
        {
            "deployment": (
                "deployment",
                "deployments",
                {"project": "Project name", "target": "production or preview", "gitRef": "Branch or commit"},
            ),
            "env_var": (
                "environment variable",
                "environment variables",
                {
                    "project": "Project name",
                    "key": "Variable name",
                    "value": "Variable value",
                    "target": "Environments",
                },
            ),
        },
    ),
    "cloudflare": (
        "Cloudflare",
        "snake",
        {
            "dns_record": (
                "DNS record",
                "DNS records",
                {
                    "zone_id": "Zone id",
                    "type": "A, AAAA, CNAME, MX or TXT",
                    "name": "Record name",
                    "content": "Record value",
                    "ttl": "Time to live",
                },
            ),
        },
    ),
}

# verb: (name verb, description template, which fields, destructive)
VERBS: dict[str, tuple[str, str, str, bool]] = {
    "create": ("create", "Create a new {one} in {service}. Returns the new {one}'s id and URL.", "fields", False),
    "get": ("get", "Get one {one} from {service} by its id, with every field.", "id", False),
    "list": ("list", "List the {many} in {service}, newest first, a page at a time.", "page", False),
    "update": (
        "update",
        "Change fields of an existing {service} {one}; fields left out keep their value.",
        "id+fields",
        False,
    ),
    "delete": ("delete", "Permanently delete a {one} from {service}. This cannot be undone.", "id", True),
    "search": ("search", "Search {service} {many} by keywords and filters; best matches first.", "query", False),
}


def _plural(word: str) -> str:
    if word == "sms":
        return word
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + ("es" if word.endswith(("s", "x")) else "s")


def _name(style: str, service: str, verb: str, thing: str) -> str:
    parts = [service, verb, *thing.split("_")]
    if verb in ("list", "search"):
        parts[-1] = _plural(parts[-1])
    if style == "camel":
        return parts[1] + "".join(p.title() for p in (parts[0], *parts[2:]))
    if style == "kebab":
        return "-".join(parts)
    return "_".join(parts)


def _string(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def generated_tools() -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for key, (service, style, things) in SERVICES.items():
        for thing, (one, many, fields) in things.items():
            for verb, (word, template, shape, destructive) in VERBS.items():
                properties: dict[str, Any] = {}
                required: list[str] = []
                if shape in ("id", "id+fields"):
                    properties["id"] = _string(f"The {one}'s id")
                    required.append("id")
                if shape in ("fields", "id+fields"):
                    properties |= {field: _string(text) for field, text in fields.items()}
                    if shape == "fields":
                        required.append(next(iter(fields)))
                if shape == "page":
                    properties |= {
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Page size"},
                        "cursor": _string("Where the last page ended"),
                    }
                if shape == "query":
                    properties |= {"query": _string("Words to look for"), "limit": {"type": "integer", "minimum": 1}}
                    required.append("query")
                tool: dict[str, Any] = {
                    "source": f"generated:{key}",
                    "name": _name(style, key, word, thing),
                    "description": template.format(one=one, many=many, service=service),
                    "inputSchema": {"type": "object", "properties": properties, "required": required},
                }
                if destructive:
                    tool["annotations"] = {"destructiveHint": True}
                elif verb in ("get", "list", "search"):
                    tool["annotations"] = {"readOnlyHint": True}
                tools.append(tool)
    return tools


async def main() -> None:
    real = await real_tools()
    generated = generated_tools()
    names = [t["name"] for t in real + generated]
    assert len(names) == len(set(names)), "tool names must be unique"
    OUT.write_text(json.dumps({"tools": real + generated}, indent=1, ensure_ascii=False) + "\n")
    print(f"{OUT.name}: {len(real)} real + {len(generated)} generated = {len(names)} tools", file=sys.stderr)


if __name__ == "__main__":
    anyio.run(main)
