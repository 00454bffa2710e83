// A producer and consumer written with Microsoft's JavaScript SDK (@azure/storage-queue), with
// the SDK's defaults: text is sent and received as it is, so base64 is the caller's choice.
//
//   node queue_client.mjs send QUEUE plain|base64      one JSON document per stdin line
//   node queue_client.mjs receive QUEUE plain|base64 COUNT
//                                                      prints each decoded JSON document, a line each
//
// The connection string comes from AZURE_STORAGE_CONNECTION_STRING.
import { QueueClient } from "@azure/storage-queue";
import { readFileSync } from "node:fs";

const [command, queueName, encoding, count] = process.argv.slice(2);
const client = new QueueClient(process.env.AZURE_STORAGE_CONNECTION_STRING, queueName);

function encode(text) {
  return encoding === "base64" ? Buffer.from(text, "utf8").toString("base64") : text;
}

function decode(text) {
  return encoding === "base64" ? Buffer.from(text, "base64").toString("utf8") : text;
}

async function send() {
  const lines = readFileSync(0, "utf8").split("\n").filter((line) => line.trim());
  for (const line of lines) {
    await client.sendMessage(encode(line));
  }
}

async function receive() {
  const documents = [];
  const deadline = Date.now() + 30000;
  while (documents.length < Number(count) && Date.now() < deadline) {
    const response = await client.receiveMessages({ numberOfMessages: 32 });
    for (const message of response.receivedMessageItems) {
      documents.push(JSON.parse(decode(message.messageText)));
      await client.deleteMessage(message.messageId, message.popReceipt);
    }
  }
  for (const document of documents) {
    process.stdout.write(JSON.stringify(document) + "\n");
  }
}

await (command === "send" ? send() : receive());
