// Both protocols share one scripting core; this module only gives the Anthropic variant its own import path.
export {
  type FakeModelServer,
  type FakeModelServerOptions,
  type RecordedRequest,
  type ScriptedReply,
  startFakeAnthropicServer,
} from './fake-model-server.js';
