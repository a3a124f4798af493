"""Tools and conversations shared by the case generators (render_templates.py,
make_template_cases.py)."""

WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                                 "unit": {"type": "string", "enum": ["c", "f"]}},
                               "required": ["city"]}}}


def holdout_convs(tools):
    """The holdout conversations, their tool calls offered the given tools."""
    return {
        "h_system_multi": dict(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"},
                                         {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
                                         {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}]),
        "h_reasoning_last": dict(messages=[{"role": "user", "content": "Why?"},
                                           {"role": "assistant", "content": "Because.",
                                            "reasoning_content": "Think first.\nThen answer."}],
                                 add_generation_prompt=False),
        "h_two_tool_calls": dict(messages=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "21"},
            {"role": "tool", "tool_call_id": "c2", "name": "get_weather", "content": "25"},
            {"role": "user", "content": "Thanks"}], tools=tools),
        "h_empty_and_ws": dict(messages=[{"role": "user", "content": "  leading and trailing  \n\n"}]),
    }
