"""Reading a cluster folder: YAML with line numbers into models, and semantic findings.

Other layers call ``load_desired`` (raises on any error) or ``validate_paths`` (every finding).
"""

from reconciler.config.findings import Finding, Severity, format_finding
from reconciler.config.loader import ClusterReport, load_desired, validate_folder, validate_paths

__all__ = [
    "ClusterReport",
    "Finding",
    "Severity",
    "format_finding",
    "load_desired",
    "validate_folder",
    "validate_paths",
]
