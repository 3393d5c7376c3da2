"""Forges' pull-request APIs (GitHub, Gitea, GitLab) over HTTP."""
