"""Worker processes: started in the sandbox, their channel and limits, how they end, and what their
errors mean."""
