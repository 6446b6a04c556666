// What every Node visitor script in the tests does once connected, whatever TypeScript SDK its
// `client` comes from: list the tools (every page) and make the calls given as JSON in order.
// Returns {tools: [names], calls: [{result} | {error: {code, message}}]}.
export async function listAndCall(client, callsJson) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools.map((tool) => tool.name));
    cursor = page.nextCursor;
  } while (cursor);
  const calls = [];
  for (const call of JSON.parse(callsJson)) {
    try {
      calls.push({ result: await client.callTool({ name: call.name, arguments: call.arguments ?? {} }) });
    } catch (error) {
      calls.push({ error: { code: error?.code ?? null, message: String(error?.message ?? error) } });
    }
  }
  return { tools, calls };
}
