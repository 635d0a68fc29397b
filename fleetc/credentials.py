"""What a credential looks like: fleetc refuses policy values of these shapes and redacts them
from every message.

fleetc's output lives in git, so a secret written into a policy would be published with it; a
policy must name a Kubernetes Secret instead. Every string value of every document is checked
(:func:`fleetc.policy.validate.credential_checks`) against known token shapes, and values under
secret-like keys against a randomness test; :class:`fleetc.errors.Diagnostic` redacts every
message with :func:`redact`. Nothing here imports another module of fleetc.
"""

from __future__ import annotations

import functools
import math
import re

_GITLAB_PREFIXES = ("glpat-", "gloas-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "glagent-",
                    "glsoat-")
#: What a credential looks like, checked in every string value of every document.
CREDENTIAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # Glued to a word too (``MY_AKIA...``): ``\b`` would not see a key id after ``_``.
    ("an AWS access key id", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])")),
    ("an AWS secret access key",
     re.compile(r"aws[\w-]*(?:secret|key)[\w-]*[\"'\s:=]+[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
                re.IGNORECASE)),
    # The whole block, so that redacting it leaves none of the key (its body in base64, its
    # lines apart or joined by a JSON-escaped \n, as in a service account's key file).
    ("a private key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----[A-Za-z0-9+/=\s\\]*"
                                 r"(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----)?")),
    # The user may be empty (``redis://:password@host``); a user alone is no credential.
    ("a URL with a password", re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")),
    ("a secret in a URL query",
     re.compile(r"[?&][\w-]*(?:password|passwd|pwd|token|secret|api[-_]?key|key|sig)=[^&\s]+",
                re.IGNORECASE)),
    # --password=..., DB_PASSWORD=..., AWS_SECRET_ACCESS_KEY=... in a command or a value; a
    # reference to an environment variable ($(DB_PASSWORD), ${...}) is how a Secret is passed.
    ("a secret in an option or variable",
     re.compile(r"(?:password|passwd|pwd|secret|token|api[-_]?key|access[-_]?key|secret[-_]?key)"
                r"=(?![$\s])[^\s&\"']+", re.IGNORECASE)),
    ("a bearer token", re.compile(r"\b[Bb]earer\s+[A-Za-z0-9._~+/-]{20,}=*")),
    ("a JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*")),
    ("a Google API key", re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("a Slack token", re.compile(r"\b(?:xox[abeoprs]|xapp)-[A-Za-z0-9-]{10,}")),
    ("a Slack webhook URL", re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{16,}")),
    # The token formats of the AI platforms and the services pipelines reach. Those marked
    # (detect-secrets) are ported from Yelp/detect-secrets (Apache-2.0), detect_secrets/plugins/
    # <name>.py at master: gitlab_token, stripe, sendgrid, openai, azure_storage_key, npm, pypi_token.
    ("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9])(?:hf|api_org)_[A-Za-z0-9]{30,}")),
    ("an Anthropic API key", re.compile(r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_-]{20,}")),
    # Legacy keys (sk- and 48 letters or digits), project, service and admin keys, and the
    # T3BlbkFJ marker of both (detect-secrets: openai); sk- and a few words (sk-learn-job) is no key.
    ("an OpenAI API key", re.compile(r"(?<![A-Za-z0-9])sk-(?:[A-Za-z0-9]{32,}|(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}"
                                     r"|[A-Za-z0-9_-]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})")),
    # A W&B API key is 40 hex digits: one near "wandb" (WANDB_API_KEY, wandb login KEY).
    ("a Weights & Biases API key",
     re.compile(r"wandb[^\n]{0,40}?(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])", re.IGNORECASE)),
    ("a GitLab token", re.compile(rf"\b(?:{'|'.join(p[:-1] for p in _GITLAB_PREFIXES)})-"
                                  r"[A-Za-z0-9_-]{20,50}(?!\w)")),  # (detect-secrets: gitlab_token)
    ("a Stripe key", re.compile(r"(?<![A-Za-z0-9])(?:[rs]k_(?:live|test)|whsec)_[0-9a-zA-Z]{16,}")),  # (stripe)
    ("a SendGrid API key", re.compile(r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}")),  # (detect-secrets: sendgrid)
    ("an Azure storage account key",  # (detect-secrets: azure_storage_key)
     re.compile(r"(?:AccountKey|SharedAccessKey)\s*=\s*[A-Za-z0-9+/=]{20,}|[A-Za-z0-9+/]{86}==")),
    ("a Google Cloud service account key",
     re.compile(r"[\"']type[\"']\s*:\s*[\"']service_account|[\"']private_key(?:_id)?[\"']\s*:")),
    ("an npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}")),  # (detect-secrets: npm)
    ("a PyPI token", re.compile(r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}")),  # (detect-secrets: pypi_token)
    ("a Replicate API token", re.compile(r"\br8_[A-Za-z0-9]{37}")),
)
#: Keys whose value is a secret when it looks random (``secretName``-like keys are references).
_SECRET_KEY = re.compile(r"password|passwd|secret|token|api[-_]?key|access[-_]?key|private[-_]?key|"
                         r"credential", re.IGNORECASE)
_REFERENCE_KEY = re.compile(r"(name|ref|reference)$", re.IGNORECASE)
_MIN_SECRET_LENGTH = 16
_MIN_SECRET_ENTROPY = 3.0  # bits per character; names and words score lower


#: All patterns in one, so the common case (no match) costs one scan per value.
_ANY_CREDENTIAL = re.compile("|".join(
    f"(?{'i' if p.flags & re.IGNORECASE else ''}:{p.pattern})" for _, p in CREDENTIAL_PATTERNS))


#: Every match of a credential pattern holds one of these (case matters in those patterns), or
#: "aws" in any case (the AWS secret access key's)...
_MATCH_FRAGMENTS = ("AKIA", "ASIA", "PRIVATE KEY", "@", "=", "gh", "github_pat_", "xox", "xapp-", "earer",
                    "eyJ", "AIza", "hooks.slack.com", "hf_", "api_org_", "k_live_", "k_test_", "whsec_",
                    "SG.", "service_account", "private_key", "npm_", "pypi-", "r8_", *_GITLAB_PREFIXES)
#: ...or ``sk-`` at the start of a word (``task-`` is no key: a probe of ``sk-`` would scan most files).
_SK_WORD = re.compile(r"(?<![A-Za-z0-9])sk-")
#: ...and every key :func:`_secret_key` accepts, in JSON text without a backslash, lower-cased,
#: matches this: one of its words, then the rest of the key, not ending as a reference does
#: (``secretName``, the way every stage output names its Secret, is no secret key), then the
#: closing quote and a colon. Without backslashes no JSON string holds a quote, so a key's
#: text runs from its word to the next quote; only a key's closing quote is followed by a colon.
_SECRET_KEY_IN_JSON = re.compile(r'(?:passw|secret|token|key|credential)[^"]*'
                                 r'(?<!name)(?<!ref)(?<!reference)"\s*:')


def may_hold_credentials(text: str) -> bool:
    """False when no value in ``text`` (a document as JSON) can be refused, which spares
    :func:`credential_checks` the scan of every value on most documents: no value holds a
    fragment of a credential pattern, and no key names a secret."""
    if any(fragment in text for fragment in _MATCH_FRAGMENTS) or not text.isascii() or "\\" in text:
        return True  # beyond ASCII, case-insensitive matching is more than lower(); escapes hide quotes
    if "sk-" in text and _SK_WORD.search(text):
        return True
    lowered = text.lower()
    return "aws" in lowered or "wandb" in lowered or _SECRET_KEY_IN_JSON.search(lowered) is not None


def looks_like(value: str) -> str:
    """What credential ``value`` holds by its shape (:data:`CREDENTIAL_PATTERNS`), or ''."""
    if _ANY_CREDENTIAL.search(value):
        return next(what for what, pattern in CREDENTIAL_PATTERNS if pattern.search(value))
    return ""


def redact(text: str) -> str:
    """``text`` with every part shaped like a credential replaced by ``<redacted>``: no message
    may print one (fleetc refuses them so that they reach no log)."""
    return _ANY_CREDENTIAL.sub("<redacted>", text) if may_hold_credentials(text) else text


def credential_kind(key: str, value: str) -> str:
    """What credential ``value`` under mapping key ``key`` holds, by its shape or (under a
    secret-like key) by its randomness; '' when none."""
    if _ANY_CREDENTIAL.search(value):
        return next(what for what, pattern in CREDENTIAL_PATTERNS if pattern.search(value))
    if _secret_key(key) and _looks_random(value):
        return f"a random-looking value under '{key}'"
    return ""


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    """Keys repeat across documents; whether one names a secret (not a reference) is cached."""
    return bool(_SECRET_KEY.search(key)) and not _REFERENCE_KEY.search(key)


def _looks_random(value: str) -> bool:
    """Long, no spaces, mixed character classes and high Shannon entropy: a token, not a name."""
    if len(value) < _MIN_SECRET_LENGTH or any(c.isspace() for c in value):
        return False
    classes = sum(any(test(c) for c in value) for test in (str.islower, str.isupper, str.isdigit))
    if classes < 2:
        return False
    counts = [value.count(c) for c in set(value)]
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts)
    return entropy >= _MIN_SECRET_ENTROPY
