"""The SAGE keyed-state seed's usage patterns, verbatim except the import lines."""

import time

from spark_keyed_sql import StatefulFunction


class UserSessionFunction(StatefulFunction):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Define keyed state - will be automatically persisted
        self.user_sessions = {}

    def execute(self, event_data):
        # Get current packet's key
        user_id = self.ctx.get_key()
        # Initialize state for new users
        if user_id not in self.user_sessions:
            self.user_sessions[user_id] = {"session_count": 0, "total_value": 0}
        # Update user's state
        self.user_sessions[user_id]["session_count"] += 1
        self.user_sessions[user_id]["total_value"] += event_data["value"]
        return self.user_sessions[user_id]


class CounterFunction(StatefulFunction):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.counters = {}  # {key: count}

    def execute(self, data):
        key = self.ctx.get_key()
        self.counters[key] = self.counters.get(key, 0) + 1
        return {key: self.counters[key]}


class WindowAggregator(StatefulFunction):
    def __init__(self, window_size=3600, **kwargs):
        super().__init__(**kwargs)
        self.window_data = {}  # {key: {window_id: [events]}}
        self.window_size = window_size

    def execute(self, event):
        key = self.ctx.get_key()
        window_id = int(time.time() // self.window_size)
        if key not in self.window_data:
            self.window_data[key] = {}
        if window_id not in self.window_data[key]:
            self.window_data[key][window_id] = []
        self.window_data[key][window_id].append(event)
        # Clean up old windows
        old_windows = [w for w in self.window_data[key] if w < window_id - 2]
        for w in old_windows:
            del self.window_data[key][w]
        return {"key": key, "window": window_id, "count": len(self.window_data[key][window_id])}


class FeatureComputer(StatefulFunction):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.features = {}  # {entity_id: feature_dict}

    def execute(self, event):
        entity_id = self.ctx.get_key()
        if entity_id not in self.features:
            self.features[entity_id] = {"mean": 0.0, "count": 0, "min": float("inf"), "max": float("-inf")}
        # Update features
        value = event["value"]
        features = self.features[entity_id]
        features["count"] += 1
        features["mean"] = (features["mean"] * (features["count"] - 1) + value) / features["count"]
        features["min"] = min(features["min"], value)
        features["max"] = max(features["max"], value)
        return {entity_id: features}


class FlexibleFunction(StatefulFunction):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.keyed_state = {}
        self.global_state = {"total_count": 0}

    def execute(self, data):
        key = self.ctx.get_key()
        # Always update global state
        self.global_state["total_count"] += 1
        if key is not None:
            # Keyed stream - update per-key state
            if key not in self.keyed_state:
                self.keyed_state[key] = {"count": 0}
            self.keyed_state[key]["count"] += 1
            return {
                "key": key,
                "key_count": self.keyed_state[key]["count"],
                "global_count": self.global_state["total_count"],
            }
        else:
            # Unkeyed stream - only global state
            return {"global_count": self.global_state["total_count"]}
