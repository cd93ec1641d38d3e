// llama-tp-server through the official `openai` npm client. run.sh starts the
// server (with the tool-call test template) and sets LLAMA_TP_BASE_URL.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI from 'openai';

const baseURL = process.env.LLAMA_TP_BASE_URL;
if (!baseURL) {
    throw new Error('LLAMA_TP_BASE_URL is not set: start the tests with tests/node/run.sh');
}
const client = new OpenAI({ baseURL, apiKey: process.env.LLAMA_TP_API_KEY ?? 'unused' });

const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const weatherTool = {
    type: 'function',
    function: {
        name: 'get_weather',
        description: 'Current weather in a city',
        parameters: {
            type: 'object',
            properties: { city: { type: 'string', enum: ['Paris', 'London'] } },
            required: ['city'],
        },
    },
};

test('models lists the served model', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(typeof models.data[0].id, 'string');
});

test('chat completion', async () => {
    const r = await client.chat.completions.create({
        model: 'any', messages: ask, max_tokens: 8, temperature: 0,
    });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 8);
});

test('streamed chat equals the blocking answer', async () => {
    const body = { model: 'any', messages: ask, max_tokens: 16, temperature: 0 };
    const whole = await client.chat.completions.create(body);
    const stream = await client.chat.completions.create({
        ...body, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
        if (chunk.usage) {
            usage = chunk.usage;
        }
        for (const choice of chunk.choices) {
            text += choice.delta.content ?? '';
            finish = choice.finish_reason ?? finish;
        }
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
    assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('required tool call', async () => {
    const r = await client.chat.completions.create({
        model: 'any', messages: ask, tools: [weatherTool], tool_choice: 'required', max_tokens: 120, temperature: 0,
    });
    const choice = r.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    assert.ok(['Paris', 'London'].includes(JSON.parse(call.function.arguments).city));
});

test('streamed tool call through the client helper', async () => {
    const runner = client.chat.completions.stream({
        model: 'any', messages: ask, tools: [weatherTool], tool_choice: 'required', max_tokens: 120, temperature: 0,
    });
    const completion = await runner.finalChatCompletion();
    const choice = completion.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    const call = choice.message.tool_calls[0];
    assert.ok(call.id.startsWith('call_'));
    assert.equal(call.function.name, 'get_weather');
    assert.ok(['Paris', 'London'].includes(JSON.parse(call.function.arguments).city));
});

test('tool result in the history', async () => {
    const r = await client.chat.completions.create({
        model: 'any',
        tools: [weatherTool],
        max_tokens: 4,
        messages: [
            ...ask,
            {
                role: 'assistant',
                content: null,
                tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
            },
            { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        ],
    });
    assert.equal(typeof r.choices[0].message.content, 'string');
});

test('invalid tools are a 400 BadRequestError', async () => {
    await assert.rejects(
        client.chat.completions.create({
            model: 'any', messages: ask, tools: [{ type: 'function', function: { name: 'a b' } }],
        }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'tools[0].function.name',
    );
});
