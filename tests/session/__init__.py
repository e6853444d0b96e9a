"""The session API: profile, record_function, schedules, the flight recorder, limits, bad arguments, signatures."""
