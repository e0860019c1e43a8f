from planner.entry import run

run()
