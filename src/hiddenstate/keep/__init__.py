"""The state as an object you keep: a model's cache checked against its full forward (:mod:`.cache_check`)."""
