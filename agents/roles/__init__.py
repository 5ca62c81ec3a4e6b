"""The agent team's roles: planner, coder and debugger, one small module each.

``agents.roles.planner.plan``, ``agents.roles.coder.code`` and ``agents.roles.debugger.debug``
each render their prompt from ``prompts/``, call the LLM client once at the role's temperature
and parse the reply into a record (``agents.roles.records``) or a recorded ``RoleFailure``.
Nothing is imported here: ``agents.contract`` and ``agents.context`` use the renderer in this
package, and the role modules use them.
"""
