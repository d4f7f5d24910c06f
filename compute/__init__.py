"""Host-side logic: what a compute host does, the resource tracker, claims."""
